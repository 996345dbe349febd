import sqlite3
from typing import Literal

from filerouter import Depends, HTTPException, Query, Request

from _lib.db import get_db
from _lib.models import Post, PostIn


def GET(request: Request, skip: int = Query(0, ge=0), limit: int = Query(10, ge=1, le=100),
        conn: sqlite3.Connection = Depends(get_db)) -> list[Post]:
    """List posts, oldest first.

    :param skip: How many posts to skip.
    :param limit: How many posts to return, at most 100.
    """
    rows = conn.execute("SELECT * FROM posts ORDER BY id LIMIT ? OFFSET ?", (limit, skip))
    return [Post(**dict(row)) for row in rows]


def POST(request: Request, post: PostIn, conn: sqlite3.Connection = Depends(get_db)) -> tuple[Post, Literal[201]]:
    """Create a post. Titles are unique: a taken one is a 409."""
    try:
        with conn:
            row = conn.execute(
                "INSERT INTO posts (title, body) VALUES (?, ?) RETURNING *", (post.title, post.body)
            ).fetchone()
    except sqlite3.IntegrityError:
        raise HTTPException(409, "A post with this title already exists") from None
    return Post(**dict(row)), 201
