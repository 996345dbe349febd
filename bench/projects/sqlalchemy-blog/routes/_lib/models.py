"""The blog's tables as SQLAlchemy 2 ORM classes, on the project's database (SQLite or
Postgres: `db.url()` speaks either)."""

from sqlalchemy import ForeignKey, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from filerouter import db

engine = create_engine(db.url())


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
