"""The host's `sql` interface (wit/filerouter.wit), with its errors raised as this module's
exceptions.

Every database operation of `Connection` and `Cursor` goes through here: the SQLite database
itself lives on the host, which runs each statement and returns its whole result at once (the
`sql.outcome` record: column names, every row, changes, last rowid, whether a transaction is
open afterwards).
"""

from componentize_py_types import Err
from wit_world.imports import sql as _sql

from ._exceptions import from_host


def _call(function, *args):
    try:
        return function(*args)
    except Err as exc:
        raise from_host(exc.value) from None


def dialect():
    """`"sqlite"` or `"postgres"`: the engine a plain database name reaches in this call."""
    return "postgres" if _sql.dialect() == _sql.Engine.POSTGRES else "sqlite"


def open(database):  # noqa: A001  (the WIT function's name)
    """A new connection to `database` (as given to `connect`); its handle."""
    return _call(_sql.open, database)


def execute(handle, statement, params, begin):
    """Run one statement; `begin` (`BEGIN ...`) first if given and no transaction is open."""
    return _call(_sql.execute, handle, statement, params, begin)


def execute_many(handle, statement, params_list, begin):
    """Run one data-changing statement once per set of parameters."""
    return _call(_sql.execute_many, handle, statement, params_list, begin)


def execute_script(handle, script):
    """Commit what is pending, then run `script`'s statements."""
    return _call(_sql.execute_script, handle, script)


def commit(handle):
    """Commit the open transaction, if any."""
    _call(_sql.commit, handle)


def rollback(handle):
    """Roll back the open transaction, if any."""
    _call(_sql.rollback, handle)


def close(handle):
    """Roll back what is pending and close the connection."""
    _sql.close(handle)
