"""The blog's posts, as Markdown."""

POSTS = {
    "hello": "# Hello, plugins\n\nThis page was rendered by a *Python* plugin.\n\n## Why\n\nRoute code calls `markdown.to_html`.",
    "c-inside": "# C inside\n\nThe slug of every title comes from a **C** plugin. See [the list](/posts).",
}
