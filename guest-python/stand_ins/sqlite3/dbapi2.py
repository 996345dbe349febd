"""The DB-API 2.0 module (PEP 249) behind `sqlite3`: `from sqlite3 import dbapi2` as SQLAlchemy
does, or `import sqlite3`, which re-exports everything here. See the package docstring for how
it differs from the standard library's."""

import datetime
import time

from ._connection import LEGACY_TRANSACTION_CONTROL, Connection, enable_callback_tracebacks
from ._cursor import PARSE_COLNAMES, PARSE_DECLTYPES, Cursor
from ._exceptions import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)
from ._row import Row
from ._values import PrepareProtocol, adapt, adapters, converters, register_adapter, register_converter

__all__ = [
    "Binary",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "LEGACY_TRANSACTION_CONTROL",
    "NotSupportedError",
    "OperationalError",
    "PARSE_COLNAMES",
    "PARSE_DECLTYPES",
    "PrepareProtocol",
    "ProgrammingError",
    "Row",
    "SQLITE_BUSY",
    "SQLITE_CONSTRAINT",
    "SQLITE_CONSTRAINT_CHECK",
    "SQLITE_CONSTRAINT_FOREIGNKEY",
    "SQLITE_CONSTRAINT_NOTNULL",
    "SQLITE_CONSTRAINT_UNIQUE",
    "SQLITE_ERROR",
    "SQLITE_FULL",
    "SQLITE_INTERRUPT",
    "SQLITE_LOCKED",
    "SQLITE_OK",
    "SQLITE_READONLY",
    "SQLITE_TOOBIG",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "Warning",
    "adapt",
    "adapters",
    "apilevel",
    "connect",
    "converters",
    "enable_callback_tracebacks",
    "paramstyle",
    "register_adapter",
    "register_converter",
    "sqlite_version",
    "sqlite_version_info",
    "threadsafety",
]

apilevel = "2.0"
paramstyle = "qmark"
# Threads may share the module, not connections (the sandbox has no threads anyway).
threadsafety = 1

# The SQLite the host runs: the one bundled with its rusqlite (libsqlite3-sys 0.40). Keep in
# step with the host; `SELECT sqlite_version()` asks the database itself.
sqlite_version = "3.54.1"
sqlite_version_info = tuple(int(part) for part in sqlite_version.split("."))

# SQLite result codes that `Error.sqlite_errorcode` may hold (see _exceptions.py).
SQLITE_OK = 0
SQLITE_ERROR = 1
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_INTERRUPT = 9
SQLITE_FULL = 13
SQLITE_TOOBIG = 18
SQLITE_CONSTRAINT = 19
SQLITE_CONSTRAINT_CHECK = 275
SQLITE_CONSTRAINT_FOREIGNKEY = 787
SQLITE_CONSTRAINT_NOTNULL = 1299
SQLITE_CONSTRAINT_UNIQUE = 2067

# DB-API type constructors.
Binary = memoryview
Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime


def DateFromTicks(ticks):  # noqa: N802  (DB-API names)
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks):  # noqa: N802
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks):  # noqa: N802
    return Timestamp(*time.localtime(ticks)[:6])


def connect(
    database,
    timeout=5.0,
    detect_types=0,
    isolation_level="",
    check_same_thread=True,
    factory=Connection,
    cached_statements=128,
    uri=False,
    *,
    autocommit=LEGACY_TRANSACTION_CONTROL,
):
    """Open a connection to the project's database: `factory(database, ...)`, a `Connection`.

    `database` is any plain file name (`"app.db"`, as SQLAlchemy sends it: `"/app.db"`) for the
    project's one database, or `":memory:"` for a private in-memory one that is gone when the
    connection closes. The host decides which names it accepts. `timeout`,
    `check_same_thread` and `cached_statements` are accepted and have no effect.
    """
    return factory(
        database,
        timeout=timeout,
        detect_types=detect_types,
        isolation_level=isolation_level,
        check_same_thread=check_same_thread,
        cached_statements=cached_statements,
        uri=uri,
        autocommit=autocommit,
    )
