from filerouter import HTTPException
from sqlalchemy.orm import Session

from _lib.models import Post, engine


def GET(request, id: int):
    """One post."""
    with Session(engine) as session:
        post = session.get(Post, id)
        if post is None:
            raise HTTPException(404, "no such post")
        return {"id": post.id, "title": post.title, "body": post.body, "comments": [c.body for c in post.comments]}
