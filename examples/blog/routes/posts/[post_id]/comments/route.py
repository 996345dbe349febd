import sqlite3
from typing import Literal

from filerouter import Depends, Request

from _lib.db import find_post, get_db
from _lib.models import Comment, CommentIn


def GET(request: Request, post_id: int, conn: sqlite3.Connection = Depends(get_db)) -> list[Comment]:
    """A post's comments, oldest first."""
    find_post(conn, post_id)
    rows = conn.execute("SELECT * FROM comments WHERE post_id = ? ORDER BY id", (post_id,))
    return [Comment(**dict(row)) for row in rows]


def POST(
    request: Request, post_id: int, comment: CommentIn, conn: sqlite3.Connection = Depends(get_db)
) -> tuple[Comment, Literal[201]]:
    """Comment on a post."""
    find_post(conn, post_id)
    with conn:
        row = conn.execute(
            "INSERT INTO comments (post_id, author, body) VALUES (?, ?, ?) RETURNING *",
            (post_id, comment.author, comment.body),
        ).fetchone()
    return Comment(**dict(row)), 201
