"""`sqlite3.Cursor`: runs statements on its connection and hands out their rows.

The host returns every row of a statement at once; the cursor keeps them and converts each one
when it is fetched (with the connection's `text_factory` and the cursor's `row_factory` at that
moment, as the standard library does).
"""

from . import _host
from ._exceptions import ProgrammingError
from ._values import column_name, converted, converter_for, params_to_host, to_python

PARSE_DECLTYPES = 1
PARSE_COLNAMES = 2


def _check_statement(statement, method):
    """`statement` if it is text SQLite can take, else the standard library's error."""
    if not isinstance(statement, str):
        raise TypeError(f"{method}() argument 1 must be str, not {type(statement).__name__}")
    if "\0" in statement:
        raise ProgrammingError("the query contains a null character")
    statement.encode("utf-8")  # a lone surrogate: the standard library's UnicodeEncodeError
    return statement


class Cursor:
    """A DB-API cursor. `execute` and friends return the cursor itself, so
    `conn.execute(...).fetchall()` works; iterating over it yields the remaining rows."""

    __module__ = "sqlite3"

    def __init__(self, connection, /):
        self._connection = connection
        self._description = None
        self._rowcount = -1
        self._lastrowid = None
        self._rows = []  # the host's rows of the last statement, not converted yet
        self._next = 0  # index of the next row to fetch
        self._converters = None  # per column, under detect_types
        self._closed = False
        self.arraysize = 1
        self.row_factory = None

    # Read-only attributes, as in the standard library.

    @property
    def connection(self):
        return self._connection

    @property
    def description(self):
        """One 7-tuple (name, None x 6) per column of the last statement; None if it had none."""
        return self._description

    @property
    def rowcount(self):
        """Rows changed by the last INSERT, UPDATE, DELETE or REPLACE (summed by
        `executemany`); -1 after any other statement."""
        return self._rowcount

    @property
    def lastrowid(self):
        """The rowid of the last row inserted through this connection, as of the last
        `execute` (not `executemany` or `executescript`); None before the first."""
        return self._lastrowid

    # Running statements.

    def execute(self, sql, parameters=(), /):
        """Run one statement with `parameters` (a sequence for `?`, a mapping for `:name`)."""
        self._check()
        _check_statement(sql, "execute")
        params = params_to_host(parameters, sql)
        self._reset()
        outcome = self._connection._run(_host.execute, sql, params)
        self._take(outcome)
        if outcome.last_row_id is not None:
            self._lastrowid = outcome.last_row_id
        return self

    def executemany(self, sql, seq_of_parameters, /):
        """Run one data-changing statement once per set of parameters (no rows come back)."""
        self._check()
        _check_statement(sql, "executemany")
        params = [params_to_host(parameters, sql) for parameters in seq_of_parameters]
        self._reset()
        outcome = self._connection._run(_host.execute_many, sql, params)
        self._take(outcome)
        self._rows = []
        return self

    def executescript(self, sql_script, /):
        """Commit what is pending, then run the statements of `sql_script` (no parameters)."""
        self._check()
        if not isinstance(sql_script, str):
            raise TypeError(f"executescript() argument must be str, not {type(sql_script).__name__}")
        if "\0" in sql_script:
            raise ValueError("embedded null character")
        sql_script.encode("utf-8")
        self._connection._run_script(sql_script)
        return self

    # Fetching rows.

    def fetchone(self):
        """The next row, or None when there are no more."""
        self._check()
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._make_row(self._rows[self._next - 1])

    def fetchmany(self, size=None):
        """Up to `size` (default `arraysize`) more rows, as a list."""
        self._check()
        if size is None:
            size = self.arraysize
        end = len(self._rows) if size <= 0 else min(len(self._rows), self._next + size)
        rows = [self._make_row(values) for values in self._rows[self._next : end]]
        self._next = max(self._next, end)
        return rows

    def fetchall(self):
        """Every remaining row, as a list."""
        return self.fetchmany(0)

    def __iter__(self):
        return self

    def __next__(self):
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def close(self):
        """Close the cursor; using it afterwards is a `ProgrammingError`."""
        self._connection._check()
        self._rows = []
        self._closed = True

    def setinputsizes(self, sizes, /):
        """Required by DB-API; does nothing."""

    def setoutputsize(self, size, column=None, /):
        """Required by DB-API; does nothing."""

    # Internals.

    def _check(self):
        if self._closed:
            raise ProgrammingError("Cannot operate on a closed cursor.")
        self._connection._check()

    def _reset(self):
        self._description = None
        self._rowcount = -1
        self._rows = []
        self._next = 0
        self._converters = None

    def _take(self, outcome):
        """Keep what `outcome` (the host's `sql.outcome`) says about the statement."""
        columns = outcome.columns
        detect_types = self._connection._detect_types
        if detect_types & PARSE_COLNAMES:
            self._converters = [converter_for(column) for column in columns]
            columns = [column_name(column) for column in columns]
        if columns:
            self._description = tuple((name, None, None, None, None, None, None) for name in columns)
        self._rowcount = outcome.changes
        self._rows = outcome.rows

    def _make_row(self, values):
        text_factory = self._connection.text_factory
        if self._converters is None:
            row = tuple(to_python(value, text_factory) for value in values)
        else:
            row = tuple(
                to_python(value, text_factory) if converter is None else converted(value, converter)
                for value, converter in zip(values, self._converters)
            )
        if self.row_factory is not None:
            row = self.row_factory(self, row)
        return row
