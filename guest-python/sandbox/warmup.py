"""A few requests through the guest's own request path at build time, before the snapshot.

CPython specializes bytecode as it runs (the adaptive interpreter) and fills caches on first
use. A snapshot taken before any request has none of that for the request path, so every
instance, which starts from the snapshot, would redo it and write the memory pages it touches;
the host then copies each of those pages back after the request. `run` calls a built-in
handler (never project code, so nothing a project does runs twice or at build time) through
the same steps a request takes, a few times, and the snapshot keeps the result. Measured on
`GET /users/42` of examples/hello in `filerouter run`: about 7 % less CPU per request, and 80
fewer pages restored after each (bench/README.md).

Middleware and pages are left out: they are project code.

`packages()` does, once at build time, the set-up that installed packages leave for their first
use and that a long-lived process does once: every instance would redo it otherwise. Today that
is SQLAlchemy's mapper configuration (`configure_mappers()`, which an ORM query triggers):
measured on an ORM read of bench/projects' models in `filerouter run`, 45.5 ms of CPU per
request without it, 28.1 ms with it.
"""

import sys
import types

import baked
import pipeline
from filerouter.requests import Request
from wit_world.imports.types import ParamValue_Single, PathParam, RouteTarget

# A name no route file can have (route files end in `.py`).
_FILE = "<filerouter warm-up>"
ROUNDS = 4


async def _get(request, item_id: int, q: str | None = None):
    return {"id": item_id, "name": "item" + str(item_id), "q": q}


def run(to_wit):
    """Serve `GET /items/42?q=x` with the built-in handler `ROUNDS` times; `to_wit` turns the
    response into the WIT record, as a request's does."""
    module = types.ModuleType("_filerouter_warmup")
    module.GET = _get
    baked.MODULES[_FILE] = module
    try:
        for _ in range(ROUNDS):
            request = Request(
                "GET",
                "/items/42",
                "q=x",
                [("host", "localhost"), ("accept", "*/*"), ("user-agent", "warm-up")],
                b"",
                client="127.0.0.1",
                path_params={"item_id": "42"},
            )
            target = RouteTarget(
                file=_FILE,
                handler="GET",
                params=[PathParam(name="item_id", value=ParamValue_Single("42"))],
            )
            to_wit(pipeline.route_response(request, target))
    finally:
        del baked.MODULES[_FILE]


def packages():
    """Finish what the project's packages would set up at first use (see the module's
    docstring). A failure is left for the request that meets it, as it would be without this:
    SQLAlchemy keeps a mapper error and raises it at each use."""
    orm = sys.modules.get("sqlalchemy.orm")
    if orm is not None:
        try:
            orm.configure_mappers()
        except Exception:  # noqa: BLE001
            pass
