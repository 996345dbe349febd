"""The blog in FastAPI, with the standard library's sqlite3 on a file: the original that
examples/blog ports, and its peer in bench/data.sh.

    uvicorn fastapi_app:app --app-dir examples/blog --port 8001

The database is BLOG_DB (default .data/fastapi.db here), migrated at start with the same
migrations/*.sql, in WAL mode as filerouter keeps its own.
"""

import os
import pathlib
import sqlite3
from typing import Annotated, Optional

from fastapi import Depends, FastAPI, HTTPException, Query
from pydantic import BaseModel, Field

HERE = pathlib.Path(__file__).parent
DB = os.environ.get("BLOG_DB", str(HERE / ".data" / "fastapi.db"))


def migrate():
    """Apply migrations/*.sql in name order, once each (as `filerouter db migrate` does)."""
    os.makedirs(os.path.dirname(os.path.abspath(DB)), exist_ok=True)
    conn = sqlite3.connect(DB)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY)")
    done = {name for (name,) in conn.execute("SELECT name FROM migrations")}
    for path in sorted((HERE / "migrations").glob("*.sql")):
        if path.name not in done:
            conn.executescript(f"BEGIN; {path.read_text()};"
                               f" INSERT INTO migrations VALUES ('{path.name}'); COMMIT;")
    conn.close()


migrate()
app = FastAPI(title="Blog", version="1.0.0")

Title = Annotated[str, Field(min_length=1, max_length=200)]


class PostIn(BaseModel):
    title: Title
    body: str = ""


class PostPatch(BaseModel):
    title: Optional[Title] = None
    body: Optional[str] = None


class Post(BaseModel):
    id: int
    title: str
    body: str
    created_at: str


class CommentIn(BaseModel):
    author: Annotated[str, Field(min_length=1, max_length=100)]
    body: Annotated[str, Field(min_length=1)]


class Comment(BaseModel):
    id: int
    post_id: int
    author: str
    body: str
    created_at: str


def get_db():
    # sync routes run in a thread pool, maybe not the thread that made the connection
    conn = sqlite3.connect(DB, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    try:
        yield conn
    finally:
        conn.close()


def find_post(conn, post_id):
    row = conn.execute("SELECT * FROM posts WHERE id = ?", (post_id,)).fetchone()
    if row is None:
        raise HTTPException(404, "Post not found")
    return row


@app.get("/posts")
def list_posts(skip: int = Query(0, ge=0), limit: int = Query(10, ge=1, le=100),
               conn=Depends(get_db)) -> list[Post]:
    """List posts, oldest first."""
    rows = conn.execute("SELECT * FROM posts ORDER BY id LIMIT ? OFFSET ?", (limit, skip))
    return [dict(row) for row in rows]


@app.post("/posts", status_code=201)
def create_post(post: PostIn, conn=Depends(get_db)) -> Post:
    """Create a post. Titles are unique: a taken one is a 409."""
    try:
        with conn:
            row = conn.execute(
                "INSERT INTO posts (title, body) VALUES (?, ?) RETURNING *", (post.title, post.body)
            ).fetchone()
    except sqlite3.IntegrityError:
        raise HTTPException(409, "A post with this title already exists") from None
    return dict(row)


@app.get("/posts/{post_id}")
def get_post(post_id: int, conn=Depends(get_db)) -> Post:
    """One post."""
    return dict(find_post(conn, post_id))


@app.patch("/posts/{post_id}")
def update_post(post_id: int, patch: PostPatch, conn=Depends(get_db)) -> Post:
    """Change a post's title or body; a title another post has is an unmapped 500."""
    find_post(conn, post_id)
    with conn:
        row = conn.execute(
            "UPDATE posts SET title = coalesce(?, title), body = coalesce(?, body)"
            " WHERE id = ? RETURNING *",
            (patch.title, patch.body, post_id),
        ).fetchone()
    return dict(row)


@app.delete("/posts/{post_id}", status_code=204)
def delete_post(post_id: int, conn=Depends(get_db)) -> None:
    """Delete a post and its comments."""
    find_post(conn, post_id)
    with conn:
        conn.execute("DELETE FROM posts WHERE id = ?", (post_id,))


@app.get("/posts/{post_id}/comments")
def list_comments(post_id: int, conn=Depends(get_db)) -> list[Comment]:
    """A post's comments, oldest first."""
    find_post(conn, post_id)
    rows = conn.execute("SELECT * FROM comments WHERE post_id = ? ORDER BY id", (post_id,))
    return [dict(row) for row in rows]


@app.post("/posts/{post_id}/comments", status_code=201)
def create_comment(post_id: int, comment: CommentIn, conn=Depends(get_db)) -> Comment:
    """Comment on a post."""
    find_post(conn, post_id)
    with conn:
        row = conn.execute(
            "INSERT INTO comments (post_id, author, body) VALUES (?, ?, ?) RETURNING *",
            (post_id, comment.author, comment.body),
        ).fetchone()
    return dict(row)
