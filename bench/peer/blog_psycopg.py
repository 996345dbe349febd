"""examples/blog's GET /posts, GET /posts/{id} and POST /posts in FastAPI with psycopg 3 on
Postgres: the peer of `bench/data.sh`'s Postgres mode (`BACKEND=postgres`).

    BLOG_PG=postgresql://user:pw@127.0.0.1:5432/db uvicorn blog_psycopg:app --app-dir bench/peer

The same handlers as examples/blog/fastapi_app.py, with `%s` placeholders, and connections from
a pool (psycopg_pool, up to 8: as many as the benchmark's clients), which a FastAPI + psycopg
service keeps: a Postgres connection per request would cost a server process each. The
tables are made by bench/data.sh (the same SQL filerouter's `--migrate` runs there).
"""

import os
from typing import Annotated

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Query
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from pydantic import BaseModel, Field

pool = ConnectionPool(os.environ["BLOG_PG"], min_size=8, max_size=8, kwargs={"row_factory": dict_row})
app = FastAPI(title="Blog", version="1.0.0")

Title = Annotated[str, Field(min_length=1, max_length=200)]


class PostIn(BaseModel):
    title: Title
    body: str = ""


class Post(BaseModel):
    id: int
    title: str
    body: str
    created_at: str


def get_db():
    with pool.connection() as conn:
        yield conn


@app.get("/posts")
def list_posts(skip: int = Query(0, ge=0), limit: int = Query(10, ge=1, le=100),
               conn=Depends(get_db)) -> list[Post]:
    """List posts, oldest first."""
    return conn.execute("SELECT * FROM posts ORDER BY id LIMIT %s OFFSET %s", (limit, skip)).fetchall()


@app.post("/posts", status_code=201)
def create_post(post: PostIn, conn=Depends(get_db)) -> Post:
    """Create a post. Titles are unique: a taken one is a 409."""
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO posts (title, body) VALUES (%s, %s) RETURNING *", (post.title, post.body)
            ).fetchone()
    except psycopg.errors.UniqueViolation:
        raise HTTPException(409, "A post with this title already exists") from None
    return row


@app.get("/posts/{post_id}")
def get_post(post_id: int, conn=Depends(get_db)) -> Post:
    """One post."""
    row = conn.execute("SELECT * FROM posts WHERE id = %s", (post_id,)).fetchone()
    if row is None:
        raise HTTPException(404, "Post not found")
    return row
