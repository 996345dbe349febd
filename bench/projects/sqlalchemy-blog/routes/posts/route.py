from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from _lib.models import Comment, Post, engine


def GET(request):
    """Every post with its comments."""
    with Session(engine) as session:
        posts = session.scalars(select(Post).options(selectinload(Post.comments)).order_by(Post.id)).all()
        return [{"id": p.id, "title": p.title, "comments": [c.body for c in p.comments]} for p in posts]


async def POST(request):
    """Create a post, with its first comments."""
    body = await request.json()
    with Session(engine) as session:
        post = Post(title=body["title"], body=body.get("body", ""), comments=[Comment(body=c) for c in body.get("comments", [])])
        session.add(post)
        try:
            session.commit()
        except IntegrityError:
            return {"detail": "a post with this title exists"}, 409
        return {"id": post.id}, 201
