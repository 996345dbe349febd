"""The DB-API exception hierarchy, as the standard library's `sqlite3` has it, plus the two
refusals of the sandbox (`NotAllowed`, `LimitExceeded`, which `filerouter.db` exports).

The host reports a failed statement as a `sql.error` case and its message (SQLite's own text,
such as "UNIQUE constraint failed: users.email"); `from_host` turns it into the exception the
standard library would raise. The host sends no SQLite result code, so `sqlite_errorcode` and
`sqlite_errorname` are read from the message where SQLite's wording makes them certain (a
constraint, a busy database), else the error class's primary code, else None.
"""

from wit_world.imports.sql import (
    Error_Data,
    Error_Integrity,
    Error_Limit,
    Error_Operational,
    Error_Programming,
    Error_Refused,
    Error_Unavailable,
)


class Warning(Exception):  # noqa: A001  (the DB-API name)
    __module__ = "sqlite3"


class Error(Exception):
    """Base of every error this module raises about the database."""

    __module__ = "sqlite3"
    # SQLite's result code and its name ("SQLITE_CONSTRAINT_UNIQUE"), when known.
    sqlite_errorcode = None
    sqlite_errorname = None


class InterfaceError(Error):
    __module__ = "sqlite3"


class DatabaseError(Error):
    __module__ = "sqlite3"


class DataError(DatabaseError):
    __module__ = "sqlite3"


class OperationalError(DatabaseError):
    __module__ = "sqlite3"


class IntegrityError(DatabaseError):
    __module__ = "sqlite3"


class InternalError(DatabaseError):
    __module__ = "sqlite3"


class ProgrammingError(DatabaseError):
    __module__ = "sqlite3"


class NotSupportedError(DatabaseError):
    __module__ = "sqlite3"


class NotAllowed(OperationalError):
    """The sandbox refuses this statement: it would reach outside the project's database
    (`ATTACH`, `load_extension`, `VACUUM INTO`, a PRAGMA that touches files or safety)."""

    __module__ = "filerouter.db"


class LimitExceeded(OperationalError):
    """A bound of the request or the project was reached: statement time, rows or bytes
    returned, the database's size, connections per request."""

    __module__ = "filerouter.db"


_CLASSES = {
    Error_Integrity: IntegrityError,
    Error_Operational: OperationalError,
    Error_Programming: ProgrammingError,
    Error_Data: DataError,
    Error_Refused: NotAllowed,
    Error_Limit: LimitExceeded,
    Error_Unavailable: OperationalError,
}

# (words in SQLite's message, result code name, result code), checked in order.
_CODES = {
    IntegrityError: (
        ("UNIQUE constraint failed", "SQLITE_CONSTRAINT_UNIQUE", 2067),
        ("NOT NULL constraint failed", "SQLITE_CONSTRAINT_NOTNULL", 1299),
        ("FOREIGN KEY constraint failed", "SQLITE_CONSTRAINT_FOREIGNKEY", 787),
        ("CHECK constraint failed", "SQLITE_CONSTRAINT_CHECK", 275),
        ("", "SQLITE_CONSTRAINT", 19),
    ),
    OperationalError: (
        ("database is locked", "SQLITE_BUSY", 5),
        ("database table is locked", "SQLITE_LOCKED", 6),
        ("readonly database", "SQLITE_READONLY", 8),
        ("interrupted", "SQLITE_INTERRUPT", 9),
        ("database or disk is full", "SQLITE_FULL", 13),
        ("", "SQLITE_ERROR", 1),
    ),
    DataError: (("too big", "SQLITE_TOOBIG", 18),),
}


def from_host(error):
    """The exception for the host's `sql.error` value `error`."""
    cls = _CLASSES.get(type(error), OperationalError)
    message = error.value
    exc = cls(message)
    # Only a failure SQLite itself reported has a code; not the sandbox's refusals and bounds,
    # nor an unreachable backend.
    if not isinstance(error, (Error_Refused, Error_Limit, Error_Unavailable)):
        for words, name, code in _CODES.get(cls, ()):
            if words in message:
                exc.sqlite_errorcode = code
                exc.sqlite_errorname = name
                break
    return exc
