"""The host's `sql` interface (wit/filerouter.wit), with its errors raised as this module's
exceptions.

Every database operation of `Connection` and `Cursor` goes through here: the SQLite database
itself lives on the host, which runs each statement and returns its whole result at once (the
`sql.outcome` record: column names, every row, changes, last rowid, whether a transaction is
open afterwards).
"""

from componentize_py_types import Err
from wit_world.imports import sql as _sql

from ._exceptions import OperationalError, from_host

# Whether the build is importing route modules (`sandbox/dispatcher.py` sets it around the
# import). The host opens no project database then, but does open private `:memory:` ones,
# for the build's own warm-up after the import (`sandbox/warmup.py`); one that a route module
# opened would stay in the snapshot. Refused here, in the host's words, so that the error
# names the route's line; the host still fails a build that leaves a connection open.
importing = False
_IMPORTING = (
    "the database is not open while the server imports route modules (`filerouter build`, route "
    "inspection): connect inside a handler or a dependency, and create tables with migrations/*.sql"
)


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
    if importing:
        raise OperationalError(_IMPORTING)
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
