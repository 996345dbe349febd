"""Jinja2 templates. Production instances see no files, so templates live in Python source
(a DictLoader) rather than in a templates/ folder."""

from jinja2 import DictLoader, Environment, select_autoescape

BOOK_HTML = """<!doctype html>
<html lang="en" data-theme="{{ theme }}">
<head><meta charset="utf-8"><title>{{ book.title }}</title></head>
<body>
<h1>{{ book.title }}</h1>
<p>by {{ book.author }} · {{ "%.2f"|format(book.price) }} · {{ book.genre.value }}</p>
{% if book.tags %}<ul>{% for tag in book.tags %}<li>{{ tag }}</li>{% endfor %}</ul>{% endif %}
</body>
</html>
"""

templates = Environment(loader=DictLoader({"book.html": BOOK_HTML}), autoescape=select_autoescape())
