"""`filerouter.db`: the project's SQL database.

Each project has one SQLite database, kept by the host (or a Postgres database, when the
operator configures one). Route code reaches it with the standard library's `sqlite3` API,
which the sandbox provides: `db.connect()` is `sqlite3.connect("app.db")`.

    from filerouter import db

    conn = db.connect()
    with conn:                                  # commit on success, roll back on an exception
        conn.execute("INSERT INTO notes (text) VALUES (?)", (text,))
    conn.execute("SELECT id, text FROM notes").fetchall()

- Any plain file name (`"app.db"`, `"data.sqlite"`, SQLAlchemy's `sqlite:///app.db`) opens the
  project's one database; the name does not pick a file. `":memory:"` opens a private, empty
  in-memory database that is gone when the connection closes.
- A connection lasts at most as long as the request that opened it. When the request ends,
  fails or times out, the host closes it and rolls back whatever was not committed: commit
  (or use `with conn:`) before returning.
- `sqlite3` works as usual; see the `sqlite3` package docstring for the few differences (no
  Python functions inside SQL). On Postgres it keeps its API, and the SQL is Postgres's.
- SQLAlchemy (and SQLModel): `create_engine(db.url())` speaks SQLite or PostgreSQL, whichever
  backend the host keeps the database in (`filerouter.dialect`); the same models and queries
  run on both. `create_engine("sqlite:///app.db")` still works, on SQLite only.
- A statement that reaches outside the database (`ATTACH`, `load_extension`, `VACUUM INTO`,
  PRAGMAs that touch files or safety) raises `NotAllowed`; a bound of the request or the
  project (statement time, rows or bytes returned, the database's size, connections per
  request) raises `LimitExceeded`. Both are `sqlite3.OperationalError`s.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from . import dialect
from ._sandbox import INSIDE, refuse_outside

if TYPE_CHECKING:
    # Checkers know the standard library's `sqlite3`, not the sandbox's own package that these
    # come from: declared here as what they are.

    class LimitExceeded(sqlite3.OperationalError):
        """A bound of the request or the project was reached."""

    class NotAllowed(sqlite3.OperationalError):
        """A statement that reaches outside the database."""

elif INSIDE:
    from sqlite3._exceptions import LimitExceeded, NotAllowed
else:  # outside the sandbox the standard library's `sqlite3` has no such module

    class LimitExceeded(sqlite3.OperationalError):
        pass

    class NotAllowed(sqlite3.OperationalError):
        pass


__all__ = ["LimitExceeded", "NotAllowed", "connect", "url"]


def connect(name: str = "app.db", **kwargs: Any) -> sqlite3.Connection:
    """A `sqlite3.Connection` to the project's database (`name=":memory:"`: a private
    in-memory one). `kwargs` are `sqlite3.connect`'s (`isolation_level`, `autocommit`,
    `detect_types`, ...)."""
    if not INSIDE:
        refuse_outside("db")
    conn: sqlite3.Connection = sqlite3.connect(name, **kwargs)
    return conn


def url() -> str:
    """SQLAlchemy's URL for the project's database: `create_engine(db.url())`.

    The engine speaks SQLAlchemy's SQLite dialect when the host keeps the database in SQLite
    and its PostgreSQL dialect when it is in Postgres, decided at its first connection in each
    request (an engine made at import time is made before any backend is known)."""
    dialect.register()
    return f"{dialect.NAME}://"
