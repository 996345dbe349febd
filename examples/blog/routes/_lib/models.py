"""Request and response shapes, as dataclasses. The FastAPI original's are pydantic models,
which work here unchanged too; the port keeps dataclasses, which filerouter checks itself
(bench/data.sh compares the two apps as they are)."""

import dataclasses
from typing import Annotated, Optional

from filerouter import Field

Title = Annotated[str, Field(min_length=1, max_length=200)]


@dataclasses.dataclass
class PostIn:
    title: Title
    body: str = ""


@dataclasses.dataclass
class PostPatch:
    title: Optional[Title] = None
    body: Optional[str] = None


@dataclasses.dataclass
class Post:
    id: int
    title: str
    body: str
    created_at: str


@dataclasses.dataclass
class CommentIn:
    author: Annotated[str, Field(min_length=1, max_length=100)]
    body: Annotated[str, Field(min_length=1)]


@dataclasses.dataclass
class Comment:
    id: int
    post_id: int
    author: str
    body: str
    created_at: str
