"""`sqlite3` inside the filerouter sandbox: the standard library's API over the host's database.

CPython on WASI has no `_sqlite3` (the C half of the standard library's `sqlite3`), and the
sandbox has no files to put a database in. This package takes the standard library's place
(`preload.py` imports it at build time, ahead of the standard library's own): it speaks the same
DB-API 2.0 interface, and the SQLite database lives on the host, reached through the `sql`
interface of `wit/filerouter.wit`. Existing code, and SQLAlchemy's `sqlite://` dialect, run
unchanged:

    import sqlite3

    conn = sqlite3.connect("app.db")           # any plain file name: the project's database
    conn.row_factory = sqlite3.Row
    with conn:                                 # commits, or rolls back on an exception
        conn.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT)")
        conn.execute("INSERT INTO notes (text) VALUES (?)", ("hello",))
    rows = conn.execute("SELECT id, text FROM notes").fetchall()
    rows[0]["text"]                            # "hello"

`filerouter.db.connect()` is the same with the project's database as the default name.

What differs from the standard library:

- Every connection belongs to the request that opened it; when the request ends the host
  closes it and rolls back whatever was not committed. At most 16 per request.
- A statement's rows all come back from the host when it runs (within the host's bounds);
  the cursor then hands them out locally.
- The host cannot call back into Python: `create_function`, `create_aggregate`,
  `create_window_function` and `create_collation` are accepted but SQL that uses them fails
  with SQLite's "no such function"; `set_authorizer` is a `NotSupportedError`;
  `set_progress_handler` and `interrupt` do nothing.
- `detect_types=PARSE_DECLTYPES` has no effect (the host does not report declared column
  types); `PARSE_COLNAMES` (`SELECT x AS "x [timestamp]"`) works with `register_converter`.
- Statements that would reach outside the database (`ATTACH`, `load_extension`,
  `VACUUM INTO`, PRAGMAs that touch files or safety) raise `filerouter.db.NotAllowed`; a bound
  of the request or the project raises `filerouter.db.LimitExceeded`. Both are
  `OperationalError`s.
- Not provided: `backup`, `blobopen`, `iterdump`, `serialize`, `deserialize`, `getlimit`,
  `setlimit`, `load_extension`, `complete_statement`.
- With `autocommit=False`, `executescript` commits the open transaction first (the host's
  `execute-script` does), as legacy mode does.
"""

from sqlite3.dbapi2 import *  # noqa: F403
from sqlite3.dbapi2 import __all__  # noqa: F401
