"""A few requests through the guest's own request path at build time, before the snapshot.

CPython specializes bytecode as it runs (the adaptive interpreter) and fills caches on first
use. A snapshot taken before any request has none of that for the request path, so every
instance, which starts from the snapshot, would redo it and write the memory pages it touches;
the host then copies each of those pages back after the request. `run` calls a built-in
handler (never project code, so nothing a project does runs twice or at build time) through
every step a request takes, from the guest's entry for the host's call on, a few times, and
the snapshot keeps the result. Measured on
`GET /users/42` of examples/hello in `filerouter run`: about 7 % less CPU per request, and 80
fewer pages restored after each (bench/README.md).

A second built-in handler takes the path most database routes take: sync, a JSON body into a
dataclass, a generator dependency that opens a connection with the sandbox's `sqlite3` and
closes it, an INSERT committed and a read by key, a dataclass answer. Its database is a private
`:memory:` one (the build has no project database; the host opens private ones during the
build, and fails a build that leaves one open). Figures, against the build that warmed the GET
handler alone: bench/README.md. A pydantic round (a `BaseModel` body and answer) was tried and left
out: it made bench/pydantic.sh's endpoints dearer, not cheaper.

Middleware and pages are left out: they are project code.

`packages()` does, once at build time, the set-up that installed packages leave for their first
use and that a long-lived process does once: every instance would redo it otherwise. Today that
is SQLAlchemy's mapper configuration (`configure_mappers()`, which an ORM query triggers):
measured on an ORM read of bench/projects' models in `filerouter run`, 45.5 ms of CPU per
request without it, 28.1 ms with it.
"""

import dataclasses
import sqlite3
import sys
import types

import baked
from filerouter import Depends
from wit_world.imports.types import HttpRequest, ParamValue_Single, PathParam, RouteTarget, Target_Route

# A name no route file can have (route files end in `.py`).
_FILE = "<filerouter warm-up>"
# Measured with the builds alternated (GET /users/42 of examples/hello, examples/blog's GET
# /posts/1 and POST /posts): 16 rounds of each handler cost 10 to 20 % less CPU per request than
# 4 rounds; 64 rounds cost more than 16 (why was not looked into).
ROUNDS = 16


async def _get(request, item_id: int, q: str | None = None):
    return {"id": item_id, "name": "item" + str(item_id), "q": q}


def _database():
    """The dependency most database routes have: a connection per request, closed after it.
    A private `:memory:` database: the build has no project database, and this one is gone
    with the build's instance."""
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    try:
        yield conn
    finally:
        conn.close()


@dataclasses.dataclass
class _ItemIn:
    title: str
    body: str = ""


@dataclasses.dataclass
class _Item:
    id: int
    title: str
    body: str


def _post(request, item_id: int, item: _ItemIn, conn: sqlite3.Connection = Depends(_database)) -> _Item:
    """A sync handler with a body, a dependency and an answer model: an INSERT committed, then
    a read of one row by its key."""
    with conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT)")
        conn.execute(
            "INSERT INTO items (id, title, body) VALUES (?, ?, ?) RETURNING *", (item_id, item.title, item.body)
        ).fetchone()
    row = conn.execute("SELECT * FROM items WHERE id = ?", (item_id,)).fetchone()
    return _Item(**dict(row))


def _request(method, body, headers):
    return HttpRequest(
        method=method,
        path="/items/42",
        query="q=x",
        headers=[("host", "localhost"), ("accept", "*/*"), ("user-agent", "warm-up"), *headers],
        body=body,
        client="127.0.0.1",
    )


def run(handle):
    """Serve `POST /items/42` (a JSON body, a database), then `GET /items/42?q=x`, with the
    built-in handlers `ROUNDS` times each. `handle(request, target)` is the guest's own entry
    for a request (`dispatcher.Guest.handle`): the warm-up takes every step a request takes
    from the host's call to the answer it returns, so that those steps are specialized too
    (they were left adaptive while only the route's own steps were warmed: measured on GET
    /users/42 of examples/hello, about a fifth less CPU a request with them warmed too). The
    project's middleware is set aside meanwhile: it is project code."""
    # The GET last: code both handlers run keeps what it was specialized for last, and the
    # simplest request is the one whose cost this shows most in (measured: 8 to 20 % less CPU
    # for GET /users/42 than with the POST last, and less for the database routes too).
    _serve(handle, ["POST", "GET"], ROUNDS)


def settle(handle):
    """Serve the GET once more, after the rest of the build's last steps (the immortal walk,
    the heap's filling): what those displaced from the interpreter's caches (its type
    attribute cache above all, 4,096 entries, whose pages a trivial request rewrote) is the
    request path's again when the snapshot is taken. Measured alternating with the build
    before (GET /users/42 of examples/hello, four rounds): about a tenth less CPU a request.
    What this round frees is the next request's to reuse, where it would allocate anyway."""
    _serve(handle, ["GET"], 1)


def _serve(handle, methods, rounds):
    module = types.ModuleType("_filerouter_warmup")
    module.GET = _get
    module.POST = _post
    baked.MODULES[_FILE] = module
    middleware = baked.ROOT_MODULES.pop("middleware.py", None)
    json = [("content-type", "application/json")]
    bodies = {"POST": (b'{"title": "warm-up", "body": "A post."}', json), "GET": (b"", [])}
    try:
        for method in methods:
            body, headers = bodies[method]
            if body:
                headers = [*headers, ("content-length", str(len(body)))]
            for _ in range(rounds):
                target = RouteTarget(
                    file=_FILE,
                    handler=method,
                    params=[PathParam(name="item_id", value=ParamValue_Single("42"))],
                )
                handle(_request(method, body, headers), Target_Route(target))
    finally:
        del baked.MODULES[_FILE]
        if middleware is not None:
            baked.ROOT_MODULES["middleware.py"] = middleware


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
