"""FastAPI's side of bench/pydantic.sh: the same models, the same two routes."""

import pathlib
import sys

from fastapi import FastAPI

sys.path.insert(0, str(pathlib.Path(__file__).parent / "routes"))
from _lib.orders import Order, OrderRecord  # noqa: E402  (the routes' own models file)

app = FastAPI()


@app.get("/")
async def root():
    return {"message": "hello"}


@app.post("/model")
def post_model(order: Order) -> Order:
    return order


@app.post("/dataclass")
def post_dataclass(order: OrderRecord) -> OrderRecord:
    return order
