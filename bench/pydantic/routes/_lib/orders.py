"""The request body of bench/pydantic.sh: ten fields, as a pydantic model and as a dataclass.
The filerouter routes and the FastAPI app (../../fastapi_app.py) import this same file."""

import dataclasses
import datetime
from typing import Literal

from pydantic import BaseModel, Field


class Order(BaseModel):
    id: int
    customer: str = Field(min_length=1, max_length=80)
    email: str
    quantity: int = Field(gt=0)
    price: float = Field(ge=0)
    currency: Literal["EUR", "USD", "GBP"] = "EUR"
    express: bool = False
    tags: list[str] = []
    placed: datetime.date
    note: str | None = None


@dataclasses.dataclass
class OrderRecord:
    id: int
    customer: str
    email: str
    quantity: int
    price: float
    placed: datetime.date
    currency: Literal["EUR", "USD", "GBP"] = "EUR"
    express: bool = False
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str | None = None
