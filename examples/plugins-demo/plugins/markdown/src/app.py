"""A small Markdown renderer: the `demo:markdown/render` interface of `../wit/markdown.wit`."""

import html
import re

from wit_world import exports
from wit_world.exports.render import Heading

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"\*([^*]+)\*"), r"<em>\1</em>"),
    (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), r'<a href="\2">\1</a>'),
]


def _inline(text):
    text = html.escape(text, quote=True)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return text


class Render(exports.Render):
    def to_html(self, src):
        out, paragraph = [], []

        def flush():
            if paragraph:
                out.append("<p>" + _inline(" ".join(paragraph)) + "</p>")
                paragraph.clear()

        for line in src.splitlines():
            heading = _HEADING.match(line)
            if heading:
                flush()
                level = len(heading.group(1))
                out.append(f"<h{level}>{_inline(heading.group(2).strip())}</h{level}>")
            elif not line.strip():
                flush()
            else:
                paragraph.append(line.strip())
        flush()
        return "\n".join(out)

    def outline(self, src):
        return [
            Heading(level=len(m.group(1)), text=m.group(2).strip())
            for m in map(_HEADING.match, src.splitlines())
            if m
        ]
