from typing import Literal

from filerouter import Depends

from _lib.db import find_post, get_db
from _lib.models import Comment, CommentIn


def GET(request, post_id: int, conn=Depends(get_db)) -> list[Comment]:
    """A post's comments, oldest first."""
    find_post(conn, post_id)
    rows = conn.execute("SELECT * FROM comments WHERE post_id = ? ORDER BY id", (post_id,))
    return [dict(row) for row in rows]


def POST(request, post_id: int, comment: CommentIn, conn=Depends(get_db)) -> tuple[Comment, Literal[201]]:
    """Comment on a post."""
    find_post(conn, post_id)
    with conn:
        row = conn.execute(
            "INSERT INTO comments (post_id, author, body) VALUES (?, ?, ?) RETURNING *",
            (post_id, comment.author, comment.body),
        ).fetchone()
    return dict(row), 201
