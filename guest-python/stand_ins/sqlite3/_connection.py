"""`sqlite3.Connection`: one connection to the project's database, held by the host.

Transactions follow the standard library. In its default, legacy mode (`autocommit` left at
`LEGACY_TRANSACTION_CONTROL`), an INSERT, UPDATE, DELETE or REPLACE opens a transaction when
none is open (`BEGIN`, or `BEGIN DEFERRED/IMMEDIATE/EXCLUSIVE` after `isolation_level`), and
`commit()` ends it; `isolation_level = None` turns that off. `autocommit=True` never opens one
(and `commit()` does nothing); `autocommit=False` always keeps one open (`commit()` and
`rollback()` open the next). The host asks SQLite whether a transaction is open after every
statement; `in_transaction` reports that.

Whatever is not committed when the request ends is rolled back (the host closes every
connection of a request when it ends), and so is what is pending when `close()` is called.
"""

import os
import traceback
import urllib.parse

from wit_world.imports.sql import Params_None_

from . import _host, _statements
from ._cursor import Cursor
from ._exceptions import (
    DataError,
    DatabaseError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)

LEGACY_TRANSACTION_CONTROL = -1
_ISOLATION_LEVELS = ("", "DEFERRED", "IMMEDIATE", "EXCLUSIVE")
_NO_PARAMS = Params_None_()
# Whether an exception in a trace callback is printed (else it is ignored), as in the standard
# library; set by `sqlite3.enable_callback_tracebacks`.
_callback_tracebacks = False


def enable_callback_tracebacks(enable, /):
    """Print the traceback of an exception raised by a trace callback (default: ignore it)."""
    global _callback_tracebacks  # noqa: PLW0603
    _callback_tracebacks = bool(enable)


def _isolation_level(value):
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("isolation_level must be str or None")
    if value.upper() not in _ISOLATION_LEVELS:
        raise ValueError("isolation_level string must be '', 'DEFERRED', 'IMMEDIATE', or 'EXCLUSIVE'")
    return value.upper()


def _autocommit(value):
    if value is True or value is False:
        return value
    if isinstance(value, int) and value == LEGACY_TRANSACTION_CONTROL:
        return LEGACY_TRANSACTION_CONTROL
    raise ValueError("autocommit must be True, False, or sqlite3.LEGACY_TRANSACTION_CONTROL")


def database_name(database, uri):
    """The name to send the host for `connect`'s `database` (str, bytes or path-like).

    With `uri=True`, `database` is an SQLite URI (`file:app.db?mode=rwc`): the host gets its
    path, or `:memory:` for `mode=memory` (a private in-memory database; `cache=shared` is
    ignored, connections never share one). Options the sandbox cannot honour (`mode=ro`,
    `immutable`, `vfs`, ...) are a `NotSupportedError` rather than silently ignored.
    """
    name = os.fspath(database)
    if isinstance(name, bytes):
        name = name.decode("utf-8")
    name.encode("utf-8")
    if not uri or not name.startswith("file:"):
        return name
    parts = urllib.parse.urlsplit(name)
    if parts.netloc not in ("", "localhost"):
        raise OperationalError(f"invalid uri authority: {parts.netloc}")
    path = urllib.parse.unquote(parts.path)
    for option, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if option == "mode" and value == "memory":
            return ":memory:"
        if (option, value) not in (("mode", "rw"), ("mode", "rwc"), ("cache", "shared"), ("cache", "private")):
            raise NotSupportedError(
                f"the SQLite URI option {option}={value} is not supported in the filerouter sandbox"
            )
    return path


class Connection:
    """A connection to the project's database (see the module docstring for transactions).

    `create_function`, `create_aggregate`, `create_window_function` and `create_collation`
    are accepted and recorded, but SQLite runs on the host, which cannot call back into Python:
    SQL that uses such a function fails with SQLite's own "no such function" error (a
    collation: "no such collation sequence"). They exist so that code which registers helpers
    it may not use (SQLAlchemy registers `regexp` and `floor` on every connection) keeps
    working. SQLite's built-in functions (`lower`, `json_extract`, ...) all work.
    """

    __module__ = "sqlite3"

    # DB-API: the exceptions are attributes of the connection too.
    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(
        self,
        database,
        timeout=5.0,
        detect_types=0,
        isolation_level="",
        check_same_thread=True,
        factory=None,
        cached_statements=128,
        uri=False,
        *,
        autocommit=LEGACY_TRANSACTION_CONTROL,
    ):
        # timeout (the host waits for a busy database itself), check_same_thread (no threads
        # in the sandbox), factory (used by `connect`) and cached_statements are accepted and
        # have no effect.
        self._handle = None
        name = database_name(database, uri)
        self._isolation_level = _isolation_level(isolation_level)
        self._autocommit = _autocommit(autocommit)
        if not isinstance(detect_types, int):
            raise TypeError(f"detect_types must be int, not {type(detect_types).__name__}")
        self._detect_types = detect_types
        self.row_factory = None
        self.text_factory = str
        self._in_transaction = False
        self._total_changes = 0
        self._trace_callback = None
        self._functions = {}  # (kind, name, arity) -> what create_function & co. were given
        self._handle = _host.open(name)
        if self._autocommit is False:
            self._begin()

    def __del__(self):
        # As the standard library does when a connection is collected: close it (so that a
        # request which drops connections unclosed does not run out of them).
        if getattr(self, "_handle", None) is not None:
            try:
                _host.close(self._handle)
            except Exception:  # noqa: BLE001, S110  (nothing to report to at collection time)
                pass
            self._handle = None

    # Statements.

    def cursor(self, factory=Cursor):
        """A new cursor (made by `factory(connection)`), with this connection's row_factory."""
        self._check()
        cursor = factory(self)
        if not isinstance(cursor, Cursor):
            raise TypeError(f"factory must return a cursor, not {type(cursor).__name__}")
        if self.row_factory is not None:
            cursor.row_factory = self.row_factory
        return cursor

    def execute(self, sql, parameters=(), /):
        """`cursor().execute(sql, parameters)`: run one statement, return the new cursor."""
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql, parameters, /):
        """`cursor().executemany(sql, parameters)`."""
        return self.cursor().executemany(sql, parameters)

    def executescript(self, sql_script, /):
        """`cursor().executescript(sql_script)`: commit, then run several statements."""
        return self.cursor().executescript(sql_script)

    # Transactions.

    def commit(self):
        """Commit the open transaction, if any (with `autocommit=True`: nothing to do)."""
        self._check()
        if self._autocommit is True:
            return
        _host.commit(self._handle)
        self._in_transaction = False
        if self._autocommit is False:
            self._begin()

    def rollback(self):
        """Roll back the open transaction, if any (with `autocommit=True`: nothing to do)."""
        self._check()
        if self._autocommit is True:
            return
        _host.rollback(self._handle)
        self._in_transaction = False
        if self._autocommit is False:
            self._begin()

    def close(self):
        """Close the connection; what is not committed is rolled back."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _host.close(handle)

    def __enter__(self):
        self._check()
        return self

    def __exit__(self, exc_type, exc, tb):
        """Commit if the block succeeded, else roll back. The connection stays open."""
        if exc_type is not None:
            self.rollback()
            return False
        try:
            self.commit()
        except Error:
            self.rollback()
            raise
        return False

    @property
    def in_transaction(self):
        """Whether a transaction is open, as of the last statement that succeeded (a failed
        one reports nothing; commit() and rollback() are right either way)."""
        self._check()
        return self._in_transaction

    @property
    def isolation_level(self):
        """How legacy mode opens transactions: "" (plain BEGIN), "DEFERRED", "IMMEDIATE",
        "EXCLUSIVE", or None: never (every statement commits on its own)."""
        self._check()
        return self._isolation_level

    @isolation_level.setter
    def isolation_level(self, value):
        level = _isolation_level(value)
        if level is None and self._autocommit == LEGACY_TRANSACTION_CONTROL:
            self._check()
            _host.commit(self._handle)
            self._in_transaction = False
        self._isolation_level = level

    @property
    def autocommit(self):
        """True, False or LEGACY_TRANSACTION_CONTROL (see the module docstring)."""
        self._check()
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value):
        mode = _autocommit(value)
        self._check()
        self._autocommit = mode
        if mode is True:
            _host.commit(self._handle)
            self._in_transaction = False
        elif mode is False and not self._in_transaction:
            self._begin()

    @property
    def total_changes(self):
        """Rows inserted, updated or deleted through this connection (as the host reported
        them, statement by statement)."""
        self._check()
        return self._total_changes

    # Callbacks into Python: accepted, not called (see the class docstring).

    def create_function(self, name, narg, func, *, deterministic=False):
        """Recorded only: the host cannot call `func` (see the class docstring)."""
        self._check()
        self._functions[("function", name, narg)] = func

    def create_aggregate(self, name, n_arg, aggregate_class):
        """Recorded only: the host cannot call `aggregate_class` (see the class docstring)."""
        self._check()
        self._functions[("aggregate", name, n_arg)] = aggregate_class

    def create_window_function(self, name, num_params, aggregate_class, /):
        """Recorded only: the host cannot call `aggregate_class` (see the class docstring)."""
        self._check()
        self._functions[("window", name, num_params)] = aggregate_class

    def create_collation(self, name, callable, /):  # noqa: A002  (the standard library's name)
        """Recorded only: the host cannot call `callable` (see the class docstring)."""
        self._check()
        self._functions[("collation", name, None)] = callable

    def set_trace_callback(self, trace_callback):
        """Call `trace_callback(sql)` with the text of each statement or script this connection
        sends (not the BEGIN and COMMIT the host runs for it); None stops it."""
        self._check()
        self._trace_callback = trace_callback

    def set_progress_handler(self, progress_handler, n):
        """Accepted, never called: the host bounds every statement's time itself."""
        self._check()

    def set_authorizer(self, authorizer_callback):
        """Not supported: the host cannot call back into Python to authorize statements."""
        raise NotSupportedError("set_authorizer is not supported in the filerouter sandbox")

    def interrupt(self):
        """Does nothing: statements run to completion (or to the request's time limit)."""
        self._check()

    # Internals, used by Cursor.

    def _check(self):
        if self._handle is None:
            raise ProgrammingError("Cannot operate on a closed database.")

    def _trace(self, sql):
        if self._trace_callback is None:
            return
        try:
            self._trace_callback(sql)
        except Exception:  # noqa: BLE001  (the standard library ignores it too)
            if _callback_tracebacks:
                traceback.print_exc()

    def _run(self, host_call, sql, params):
        """Run `sql` with `host_call` (`_host.execute` or `_host.execute_many`), opening a
        transaction first when legacy mode asks for one; the host's outcome."""
        self._trace(sql)
        begin = None
        if (
            self._autocommit == LEGACY_TRANSACTION_CONTROL
            and self._isolation_level is not None
            and _statements.changes_data(sql)
        ):
            begin = _statements.begin_statement(self._isolation_level)
        outcome = host_call(self._handle, sql, params, begin)
        self._note(outcome)
        return outcome

    def _run_script(self, script):
        self._trace(script)
        self._note(_host.execute_script(self._handle, script))

    def _begin(self):
        """Open a transaction now (autocommit=False keeps one open at all times)."""
        self._note(_host.execute(self._handle, "BEGIN", _NO_PARAMS, None))

    def _note(self, outcome):
        self._in_transaction = outcome.in_transaction
        if outcome.changes > 0:
            self._total_changes += outcome.changes

