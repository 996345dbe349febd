from typing import Any

from filerouter import JSONResponse, Request
from pydantic import ValidationError

from _lib.models import PointsAdapter


async def POST(request: Request) -> Any:
    try:
        found = PointsAdapter.validate_python(await request.json())
    except ValidationError as e:
        return JSONResponse({"errors": e.errors(include_url=False, include_context=False)}, status_code=400)
    return PointsAdapter.dump_python(found, mode="json")
