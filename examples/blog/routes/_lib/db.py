"""The database dependency and the lookups the routes share."""

import sqlite3
from collections.abc import Iterator

from filerouter import HTTPException


def get_db() -> Iterator[sqlite3.Connection]:
    """A connection to the project's database for one request, closed after it."""
    conn = sqlite3.connect("app.db")
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    try:
        yield conn
    finally:
        conn.close()


def find_post(conn: sqlite3.Connection, post_id: int) -> sqlite3.Row:
    """The post's row, or a 404."""
    row: sqlite3.Row | None = conn.execute("SELECT * FROM posts WHERE id = ?", (post_id,)).fetchone()
    if row is None:
        raise HTTPException(404, "Post not found")
    return row
