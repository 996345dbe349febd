"""The same blog in FastAPI with SQLAlchemy 2, for bench/orm.sh: the models of
routes/_lib/models.py on DATABASE_URL (`sqlite:///FILE` or `postgresql+psycopg://...`), the
handlers of routes/posts/ as FastAPI path operations. Tables come from migrations/ (made by the
benchmark before the server starts)."""

import os

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from sqlalchemy import ForeignKey, String, create_engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, selectinload

engine = create_engine(os.environ["DATABASE_URL"], pool_size=8)


class Base(DeclarativeBase):
    pass


class Post(Base):
    __tablename__ = "posts"
    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(String(200), unique=True)
    body: Mapped[str] = mapped_column(default="")
    comments: Mapped[list["Comment"]] = relationship(back_populates="post", order_by="Comment.id")


class Comment(Base):
    __tablename__ = "comments"
    id: Mapped[int] = mapped_column(primary_key=True)
    post_id: Mapped[int] = mapped_column(ForeignKey("posts.id"))
    body: Mapped[str]
    post: Mapped[Post] = relationship(back_populates="comments")


app = FastAPI()


@app.get("/posts")
def list_posts():
    with Session(engine) as session:
        posts = session.scalars(select(Post).options(selectinload(Post.comments)).order_by(Post.id)).all()
        return [{"id": p.id, "title": p.title, "comments": [c.body for c in p.comments]} for p in posts]


@app.post("/posts", status_code=201)
async def create_post(request: Request):
    body = await request.json()
    with Session(engine) as session:
        post = Post(title=body["title"], body=body.get("body", ""), comments=[Comment(body=c) for c in body.get("comments", [])])
        session.add(post)
        try:
            session.commit()
        except IntegrityError:
            return JSONResponse({"detail": "a post with this title exists"}, status_code=409)
        return {"id": post.id}


@app.get("/posts/{id}")
def get_post(id: int):
    with Session(engine) as session:
        post = session.get(Post, id)
        if post is None:
            raise HTTPException(404, "no such post")
        return {"id": post.id, "title": post.title, "body": post.body, "comments": [c.body for c in post.comments]}
