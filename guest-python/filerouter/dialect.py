"""SQLAlchemy's dialect for the project's database, on whichever backend the host keeps it in.

    from sqlalchemy import create_engine
    from filerouter import db

    engine = create_engine(db.url())            # "filerouter://"

The same project runs on SQLite (the data folder: `dev`, and `run` by default) and on Postgres
(`run --database-url`, a tenant's `database_url`), and route code is imported once, at build
time, before any backend is known: an engine made at import time cannot pick its SQL then. So
`filerouter://` names this module's `Dialect`, which speaks no SQL of its own: at its first
connection in a request it becomes SQLAlchemy's SQLite dialect (`pysqlite`) or its PostgreSQL
dialect, by asking the host which backend is in force, and from then on it is that dialect.
Both use the sandbox's `sqlite3` (the host's `sql` interface) as their DB-API driver.

On Postgres the host returns what its `sql` interface can carry (integers, reals, text,
bytes): dates, times, timestamps, numerics, UUIDs and JSON come back as text, and the types
below turn them back into what SQLAlchemy's types give elsewhere (`datetime`, `Decimal`,
`uuid.UUID`, parsed JSON, `bool`). Timestamps with a time zone come back in UTC.

Not here: the DB-API itself (`stand_ins/sqlite3`), or what the host allows a statement to do.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import importlib
import sqlite3
import uuid
from typing import Any

from ._sandbox import INSIDE

if INSIDE:
    # The sandbox's `sqlite3` talks to the host; imported now, as guest modules are.
    _sql_host: Any = importlib.import_module("sqlite3._host")

NAME = "filerouter"


def register() -> None:
    """Make `filerouter://` URLs reach [`Dialect`] (`filerouter.db.url()` does this)."""
    from sqlalchemy.dialects import registry

    registry.register(NAME, __name__, "Dialect")


def backend() -> str:
    """`"sqlite"` or `"postgres"`: where a plain database name reaches in this request."""
    if not INSIDE:
        return "sqlite"
    return str(_sql_host.dialect())


def __getattr__(name: str) -> Any:
    # SQLAlchemy is the project's package, not the guest's: the classes are made when
    # SQLAlchemy first asks for them (`registry.register` above), not when this module is
    # imported (at the guest's build, where there is no SQLAlchemy).
    try:
        return _dialects()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


@functools.cache
def _dialects() -> dict[str, Any]:
    """SQLAlchemy's dialects for the sandbox: `Dialect`, `SqliteDialect`, `PostgresDialect`."""
    from sqlalchemy import pool, util
    from sqlalchemy import types as sqltypes
    from sqlalchemy.dialects.postgresql.base import PGDialect
    from sqlalchemy.dialects.postgresql.types import PGUuid
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
    from sqlalchemy.engine import URL, default

    def _text_to(parse: Any) -> Any:
        """A result processor: None stays None, text is parsed, anything else is as it came."""

        def process(value: Any) -> Any:
            return parse(value) if isinstance(value, str) else value

        return process


    def _iso(value: Any) -> Any:
        return None if value is None else value.isoformat() if hasattr(value, "isoformat") else value


    class _DateTime(sqltypes.DateTime):
        def bind_processor(self, dialect: Any) -> Any:
            def process(value: Any) -> Any:
                if isinstance(value, datetime.datetime):
                    return value.isoformat(sep=" ")
                return _iso(value)

            return process

        def result_processor(self, dialect: Any, coltype: Any) -> Any:
            return _text_to(datetime.datetime.fromisoformat)


    class _Date(sqltypes.Date):
        def bind_processor(self, dialect: Any) -> Any:
            return _iso

        def result_processor(self, dialect: Any, coltype: Any) -> Any:
            return _text_to(datetime.date.fromisoformat)


    class _Time(sqltypes.Time):
        def bind_processor(self, dialect: Any) -> Any:
            return _iso

        def result_processor(self, dialect: Any, coltype: Any) -> Any:
            return _text_to(datetime.time.fromisoformat)


    def _decimal(value: Any) -> decimal.Decimal:
        return decimal.Decimal(value if isinstance(value, (str, int)) else repr(value))


    class _Numeric(sqltypes.Numeric[Any]):
        def bind_processor(self, dialect: Any) -> Any:
            def process(value: Any) -> Any:
                return str(value) if isinstance(value, decimal.Decimal) else value

            return process

        def result_processor(self, dialect: Any, coltype: Any) -> Any:
            def process(value: Any) -> Any:
                if value is None:
                    return None
                return _decimal(value) if self.asdecimal else float(value)

            return process


    class _Float(_Numeric, sqltypes.Float[Any]):
        pass


    class _Boolean(sqltypes.Boolean):
        def result_processor(self, dialect: Any, coltype: Any) -> Any:
            def process(value: Any) -> Any:
                return None if value is None else bool(value)

            return process


    class _Uuid(PGUuid[Any]):
        def bind_processor(self, dialect: Any) -> Any:
            def process(value: Any) -> Any:
                return str(value) if isinstance(value, uuid.UUID) else value

            return process

        def result_processor(self, dialect: Any, coltype: Any) -> Any:
            if not self.as_uuid:
                return None
            return _text_to(uuid.UUID)


    class PostgresDialect(PGDialect):
        """SQLAlchemy's PostgreSQL dialect over the sandbox's DB-API (named parameters, which the
        host turns into Postgres's `$1`)."""

        driver = NAME
        supports_statement_cache = True
        supports_server_side_cursors = False
        default_paramstyle = "named"
        colspecs = util.update_copy(
            PGDialect.colspecs,
            {
                sqltypes.DateTime: _DateTime,
                sqltypes.Date: _Date,
                sqltypes.Time: _Time,
                sqltypes.Numeric: _Numeric,
                sqltypes.Float: _Float,
                sqltypes.Boolean: _Boolean,
                sqltypes.Uuid: _Uuid,
            },
        )

        @classmethod
        def import_dbapi(cls) -> Any:
            return sqlite3

        def initialize(self, connection: Any) -> None:
            # What PGDialect.initialize asks in five round trips, in one: every request starts
            # from a fresh instance, so this runs once per request that uses the database.
            version, schema, strings, isolation = connection.exec_driver_sql(
                "SELECT current_setting('server_version_num'), current_schema(),"
                " current_setting('standard_conforming_strings'),"
                " current_setting('transaction_isolation')"
            ).one()
            number = int(version)
            self.server_version_info = (number // 10000, number % 10000)
            self.default_schema_name = schema
            level: Any = str(isolation).upper()
            self.default_isolation_level = level
            self._backslash_escapes = strings == "off"
            self.supports_smallserial = True
            self._supports_drop_index_concurrently = True
            self.supports_identity_columns = True
            self._supports_jsonb_subscripting = self.server_version_info >= (14,)

        def do_ping(self, dbapi_connection: Any) -> bool:
            dbapi_connection.execute("SELECT 1")
            return True


    class SqliteDialect(SQLiteDialect_pysqlite):
        """SQLAlchemy's SQLite dialect over the sandbox's `sqlite3`, as `sqlite:///app.db` is."""

        driver = NAME
        supports_statement_cache = True


    class Dialect(default.DefaultDialect):
        """What `filerouter://` names: becomes [`SqliteDialect`] or [`PostgresDialect`] at its first
        connection (see the module's docstring)."""

        name = NAME
        driver = NAME
        supports_statement_cache = True

        def __init__(self, **kwargs: Any) -> None:
            self._arguments = kwargs
            super().__init__(**kwargs)

        @classmethod
        def import_dbapi(cls) -> Any:
            return sqlite3

        def create_connect_args(self, url: URL) -> Any:
            if url.host or url.port or url.username or url.password or url.database:
                raise ValueError(
                    f"{NAME}:// takes no host, user or database: it is the project's database "
                    "(use filerouter.db.url())"
                )
            return (["app.db"], {})

        @classmethod
        def get_pool_class(cls, url: URL) -> Any:
            # Connections end with their request (each request is a fresh instance); a queue
            # lets one request hold several, as on either backend.
            return pool.QueuePool

        def on_connect(self) -> Any:
            def become(dbapi_connection: Any) -> None:
                chosen = _become(self)
                then = chosen.on_connect()
                if then is not None:
                    then(dbapi_connection)

            return become


    def _become(dialect: Any) -> Any:
        """Turn `dialect` (a [`Dialect`] at first) into the dialect of the backend in force."""
        if type(dialect) is not Dialect:
            return dialect
        arguments = dict(dialect._arguments)
        if backend() == "postgres":
            chosen: Any = PostgresDialect
            arguments["paramstyle"] = "named"
        else:
            chosen = SqliteDialect
        # A dialect as `chosen(**arguments)` would make it, in the engine's dialect object.
        dialect.__dict__.clear()
        dialect.__class__ = chosen
        chosen.__init__(dialect, **arguments)
        return dialect

    return {"Dialect": Dialect, "SqliteDialect": SqliteDialect, "PostgresDialect": PostgresDialect}
