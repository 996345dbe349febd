"""GET /colors/{color} — an Enum path parameter; the docstring in Google style."""

from enum import Enum
from typing import Any

from filerouter import Request


class Color(Enum):
    red = "red"
    green = "green"
    blue = "blue"


def GET(request: Request, color: Color, shade: int = 50, dark: bool = False) -> Any:
    """Describe a color.

    Any value other than red, green or blue is a 422 naming the allowed values.

    Args:
        shade: Lightness from 0 to 100.
        dark: Whether to describe the dark variant.
    """
    name = ("dark " if dark else "") + color.value
    return {"color": color.value, "name": name, "shade": shade}
