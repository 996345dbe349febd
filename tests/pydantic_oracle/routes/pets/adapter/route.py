from typing import Any

from filerouter import JSONResponse, Request
from pydantic import ValidationError

from _lib.models import PetAdapter


async def POST(request: Request) -> Any:
    try:
        pet = PetAdapter.validate_json((await request.body()).decode())
    except ValidationError as e:
        return JSONResponse({"errors": e.errors(include_url=False, include_context=False)}, status_code=400)
    return {"kind": pet.kind, "dumped": PetAdapter.dump_python(pet, mode="json"), "schema": PetAdapter.json_schema()}
