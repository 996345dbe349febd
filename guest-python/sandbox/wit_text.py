"""Text that crosses the WIT boundary to the host.

A WIT `string` holds Unicode scalar values. A Python `str` may also hold lone surrogates
("\\udc80": from a JSON `\\udc80` escape, `surrogateescape` decoding, or a literal in project
code), and componentize-py cannot encode one: the instance would stop with a trap instead of an
answer. So every string the guest hands the host passes through here first:

- text the guest reports about project code (error messages, tracebacks, docstrings) is made
  safe with `safe`, which writes such characters as `\\udc80` escapes;
- text project code chose to send (a header, a kv key) is checked with `require`, which raises
  a `ValueError` that the code can catch, naming what was wrong.
"""


def has_lone_surrogate(text):
    """Whether `text` holds a character UTF-8 cannot encode (a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def safe(text):
    """`text` with lone surrogates written as backslash escapes; `None` stays `None`."""
    if text is None:
        return None
    text = str(text)
    if not has_lone_surrogate(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def require(text, what):
    """`text`, if it can cross to the host; else a `ValueError` naming `what`."""
    if has_lone_surrogate(text):
        first = next(c for c in text if 0xD800 <= ord(c) <= 0xDFFF)
        raise ValueError(
            f"{what} contains a lone surrogate ({first!r}), which is not valid Unicode text and "
            "cannot be sent; encode it first (for example with text.encode('utf-8', 'replace'))"
        )
    return text


def find_in(value):
    """The first string (key or value) in a JSON-like `value` that holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                return item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None
