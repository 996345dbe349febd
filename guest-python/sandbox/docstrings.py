"""Reading handler docstrings for the API reference: summary, description, parameter texts.

Two styles are understood, as the original project's docs extracted query parameters from
docstrings: Sphinx (`:param name: text`, `:type name: ...` ignored) and Google (an `Args:` or
`Parameters:` block of `name (type): text` lines, continuation lines indented deeper).
"""

import re

_SPHINX = re.compile(r"^:param\s+(?:[\w\[\], .|]+\s+)?(\w+):\s*(.*)$")
_SPHINX_OTHER = re.compile(r"^:(type|rtype|returns?|raises?)\b")
_GOOGLE_HEADER = re.compile(r"^(Args|Arguments|Parameters|Params|Query parameters|Query):\s*$", re.I)
_GOOGLE_SECTION = re.compile(r"^(Returns|Return|Raises|Yields|Examples?|Notes?|Attributes):\s*$", re.I)
_GOOGLE_ITEM = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse(doc):
    """(summary, description, {param: text}) of a cleaned docstring (`inspect.getdoc`)."""
    if not doc:
        return None, None, {}
    lines = doc.splitlines()
    params = {}
    kept = []
    current = None  # the parameter a continuation line belongs to
    mode = None  # None, "sphinx" or "google"
    google_indent = None
    for line in lines:
        stripped = line.strip()
        if mode == "google":
            indent = len(line) - len(line.lstrip())
            if not stripped:
                current = None
                continue
            if google_indent is None:
                google_indent = indent
            if indent >= google_indent and indent > 0:
                item = _GOOGLE_ITEM.match(stripped)
                if item and indent == google_indent:
                    current = item.group(1)
                    params[current] = item.group(2).strip()
                elif current:
                    params[current] = (params[current] + " " + stripped).strip()
                continue
            mode = None
        sphinx = _SPHINX.match(stripped)
        if sphinx:
            mode, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if _SPHINX_OTHER.match(stripped):
            mode, current = "sphinx", None
            continue
        if mode == "sphinx" and stripped and line[:1].isspace() and current:
            params[current] = (params[current] + " " + stripped).strip()
            continue
        if _GOOGLE_HEADER.match(stripped):
            mode, current, google_indent = "google", None, None
            continue
        if _GOOGLE_SECTION.match(stripped):
            mode, current = "skip", None
            continue
        if mode == "skip":
            if stripped and not line[:1].isspace():
                mode = None
            else:
                continue
        mode = None if mode == "sphinx" and not stripped else mode
        if mode is None:
            kept.append(line)
    text = "\n".join(kept).strip()
    if not text:
        return None, None, params
    first, _, rest = text.partition("\n")
    rest = rest.strip()
    return first.strip(), (rest or None), params
