import sqlite3

from filerouter import Depends, Request

from _lib.db import find_post, get_db
from _lib.models import Post, PostPatch


def GET(request: Request, post_id: int, conn: sqlite3.Connection = Depends(get_db)) -> Post:
    """One post."""
    return Post(**dict(find_post(conn, post_id)))


def PATCH(request: Request, post_id: int, patch: PostPatch, conn: sqlite3.Connection = Depends(get_db)) -> Post:
    """Change a post's title or body (fields left out or null stay as they are).

    A title another post has is not mapped to a 409 here: the `sqlite3.IntegrityError`
    escapes and the answer is a 500, as an unexpected database error would be.
    """
    find_post(conn, post_id)
    with conn:
        row = conn.execute(
            "UPDATE posts SET title = coalesce(?, title), body = coalesce(?, body)"
            " WHERE id = ? RETURNING *",
            (patch.title, patch.body, post_id),
        ).fetchone()
    return Post(**dict(row))


def DELETE(request: Request, post_id: int, conn: sqlite3.Connection = Depends(get_db)) -> None:
    """Delete a post and its comments."""
    find_post(conn, post_id)
    with conn:
        conn.execute("DELETE FROM posts WHERE id = ?", (post_id,))
