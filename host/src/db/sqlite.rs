//! Running route code's SQL in SQLite: the project's file, its pool of connections, and one
//! statement at a time under the request's deadline and bounds.
//!
//! The file is in WAL mode with `synchronous = FULL`: a committed transaction is on disk before
//! `commit()` returns, readers never wait for the writer, and writers wait for each other up to
//! the request's deadline (at most [`BUSY_WAIT`]). A [`Connection`] is checked out of the
//! [`Store`]'s pool for one request and goes back when the request drops it: rolled back, its
//! per-connection PRAGMAs reset ([`RESET_PRAGMAS`]); a connection that holds temporary tables
//! is closed instead, so nothing of one request reaches the next. Everything here may block:
//! call it on a database thread ([`threads`]), except [`Store::checkout_idle`] and
//! [`Connection::execute_here`], which never wait (see there) and so run where the request's
//! guest runs.

use std::{
    cell::{Cell, RefCell},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use rusqlite::{OpenFlags, config::DbConfig, ffi, limits::Limit, types::ValueRef};

use super::{
    Allowance, Bounds, DbError, Outcome, Params, Value, functions, guard, threads, vfs::Disk,
};

/// The longest a statement waits for another writer.
pub const BUSY_WAIT: Duration = Duration::from_secs(5);

/// Connections kept open between requests, per database.
const MAX_IDLE: usize = 32;

/// The per-connection PRAGMAs route code may set, back at SQLite's defaults; run when a
/// connection returns to the pool. (`case_sensitive_like` is not among them: it would put
/// SQLite's own recursive `LIKE` back, see [`functions`].)
pub const RESET_PRAGMAS: &str = "PRAGMA foreign_keys = 0; PRAGMA defer_foreign_keys = 0; \
    PRAGMA recursive_triggers = 0; PRAGMA reverse_unordered_selects = 0; \
    PRAGMA legacy_alter_table = 0; PRAGMA automatic_index = 1; PRAGMA query_only = 0; \
    PRAGMA read_uncommitted = 0;";

/// SQLite's limits on route code's connections, each chosen, none left to a default: what one
/// statement may hold, and how deep it may nest (every nesting is a recursion on the database
/// thread's stack, [`threads::STACK_BYTES`]). Past one, the statement fails with SQLite's
/// message (`DataError` for a value too big, `OperationalError` for the others).
pub const LIMITS: &[(Limit, i32, &str)] = &[
    (
        Limit::SQLITE_LIMIT_LENGTH,
        64 * 1024 * 1024,
        "bytes in one text or blob value, or one row",
    ),
    (
        Limit::SQLITE_LIMIT_SQL_LENGTH,
        1024 * 1024,
        "bytes in one statement's text",
    ),
    (
        Limit::SQLITE_LIMIT_COLUMN,
        2000,
        "columns in a table, index, view, result or ORDER BY",
    ),
    (
        Limit::SQLITE_LIMIT_EXPR_DEPTH,
        1000,
        "depth of an expression's parse tree",
    ),
    (
        Limit::SQLITE_LIMIT_COMPOUND_SELECT,
        500,
        "SELECTs joined by UNION, EXCEPT or INTERSECT",
    ),
    (
        Limit::SQLITE_LIMIT_VDBE_OP,
        1_000_000,
        "instructions in one compiled statement",
    ),
    (
        Limit::SQLITE_LIMIT_FUNCTION_ARG,
        127,
        "arguments to one function",
    ),
    (
        Limit::SQLITE_LIMIT_ATTACHED,
        0,
        "attached databases (ATTACH is refused as well)",
    ),
    (
        Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH,
        10_000,
        "bytes in a LIKE or GLOB pattern",
    ),
    (
        Limit::SQLITE_LIMIT_VARIABLE_NUMBER,
        32_766,
        "parameters in one statement",
    ),
    (
        Limit::SQLITE_LIMIT_TRIGGER_DEPTH,
        100,
        "triggers that fire triggers, nested",
    ),
    (
        Limit::SQLITE_LIMIT_WORKER_THREADS,
        0,
        "helper threads one statement may start (sorting)",
    ),
];

/// Open the SQLite file at `path` (creating it) in WAL mode with full synchronous commits: the
/// connection the host itself uses (kv, migrations).
pub fn open_file(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    make_durable(&conn)?;
    Ok(conn)
}

/// WAL with full synchronous commits, waiting up to [`BUSY_WAIT`] for other writers.
fn make_durable(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_WAIT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")
}

/// When a request's statements must stop, and where their CPU time is counted.
#[derive(Clone)]
pub struct Watch {
    pub deadline: Instant,
    /// Set when the request ended.
    pub cancelled: Arc<AtomicBool>,
    /// The request's time budget: the CPU its statements use on the database threads is
    /// charged to it (and to its tenant) as they run, and a statement stops when the request
    /// is past its CPU limit. None for the server's own calls.
    pub budget: Option<crate::scheduler::Budget>,
}

impl Watch {
    /// Whether the statement may go on: the request has not ended, its deadline has not
    /// passed, and with the CPU used since the last question charged, it is within its CPU
    /// limit. A statement that has become heavy is moved to the idle class meanwhile.
    pub fn keep_going(&self) -> bool {
        threads::pace();
        if self.cancelled.load(Ordering::Relaxed) || Instant::now() >= self.deadline {
            return false;
        }
        match &self.budget {
            Some(budget) => budget.charge_host_cpu(threads::take_cpu()),
            None => true,
        }
    }

    /// Charge what the statement used since the last question (when it is done).
    pub fn charge_rest(&self) {
        if let Some(budget) = &self.budget {
            budget.charge_host_cpu(threads::take_cpu());
        }
    }
}

thread_local! {
    /// The watch of the statement this database thread is running, for the host's SQL
    /// functions ([`functions`]), which SQLite's progress handler does not reach.
    static RUNNING: RefCell<Option<Watch>> = const { RefCell::new(None) };
    /// While a statement runs in [`Connection::execute_here`]: when it must give up there.
    static HERE_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether the statement gave up (it ran past [`HERE_FOR`]), or SQLite reported that it
    /// would have had to wait for a lock ([`error`] notes it).
    static GO_ELSEWHERE: Cell<bool> = const { Cell::new(false) };
}

/// How long a statement may run on a guest's thread ([`Connection::execute_here`]) before it
/// is stopped there and run again from the start on a database thread.
pub const HERE_FOR: Duration = Duration::from_millis(1);

/// Whether the statement running on this thread may go on (true for the host's own).
pub fn keep_going() -> bool {
    !here_overdue() && RUNNING.with_borrow(|watch| watch.as_ref().is_none_or(Watch::keep_going))
}

/// Whether a statement run by [`Connection::execute_here`] has run past [`HERE_FOR`] (noted:
/// it is then interrupted and run again on a database thread).
fn here_overdue() -> bool {
    match HERE_UNTIL.get() {
        Some(until) if Instant::now() >= until => {
            GO_ELSEWHERE.set(true);
            true
        }
        _ => false,
    }
}

/// The statement of a watched connection is running on this thread until this is dropped.
struct Running;

impl Running {
    fn enter(watch: &Option<Watch>) -> Running {
        RUNNING.set(watch.clone());
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(watch) = RUNNING.take() {
            watch.charge_rest();
        }
    }
}

/// One database: where it is and its idle connections.
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    /// `None`: every connection is a private in-memory database.
    path: Option<PathBuf>,
    bounds: Bounds,
    idle: Mutex<Vec<Guarded>>,
    /// The VFS that counts the database's temporary files and log; made at the first
    /// connection of an in-memory store.
    disk: std::sync::OnceLock<Arc<Disk>>,
}

/// A connection with its guard, installed once when it was opened: installing an authorizer
/// expires every prepared statement, so a guard per checkout would empty the statement cache
/// at every request.
struct Guarded {
    conn: rusqlite::Connection,
    guard: Arc<guard::State>,
    counters: Arc<functions::Counters>,
    /// The VFS the connection's files go through; it must outlive the connection (a field
    /// after `conn`, so dropped after it).
    disk: Arc<Disk>,
}

impl Store {
    /// The database in the file at `path`, created if missing.
    pub fn file(path: &Path, bounds: Bounds) -> Result<Store, DbError> {
        let store = Store {
            inner: Arc::new(StoreInner {
                path: Some(path.to_path_buf()),
                bounds,
                idle: Mutex::new(Vec::new()),
                disk: std::sync::OnceLock::new(),
            }),
        };
        // Open one now: a folder that cannot hold the file is an error at start, not at the
        // first request.
        let first = store.connect()?;
        store.inner.idle().push(first);
        Ok(store)
    }

    /// Every connection a private, empty in-memory database.
    pub fn memory(bounds: Bounds) -> Store {
        Store {
            inner: Arc::new(StoreInner {
                path: None,
                bounds,
                idle: Mutex::new(Vec::new()),
                disk: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The same file with other bounds (its connections are set up for the old ones).
    pub fn with_bounds(&self, bounds: Bounds) -> Result<Store, DbError> {
        match &self.inner.path {
            Some(path) => Store::file(path, bounds),
            None => Ok(Store::memory(bounds)),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// An idle connection of the pool for route code, if there is one: no file is opened and
    /// nothing waits, so this may run on a guest's thread ([`Store::checkout`] otherwise, on a
    /// database thread).
    pub fn checkout_idle(&self, watch: Watch) -> Option<Result<Connection, DbError>> {
        let conn = self.inner.idle().pop()?;
        Some(Connection::new(conn, Some(self.inner.clone()), Some(watch)))
    }

    /// A connection to the database for route code (`watch`) or the host (`None`).
    pub fn checkout(&self, watch: Option<Watch>) -> Result<Connection, DbError> {
        let idle = self.inner.idle().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.connect()?,
        };
        Connection::new(conn, Some(self.inner.clone()), watch)
    }

    /// A private in-memory database for route code, gone when the connection closes. Its
    /// pages count against the request's `max_memory_bytes` ([`Connection::limit_memory`]).
    pub fn private_memory(&self, watch: Watch) -> Result<Connection, DbError> {
        let disk = self.inner.disk()?;
        let conn = open_memory(&disk)?;
        let mut conn =
            Connection::new(guarded(conn, &self.inner.bounds, disk)?, None, Some(watch))?;
        conn.private_memory = true;
        Ok(conn)
    }

    fn connect(&self) -> Result<Guarded, DbError> {
        let disk = self.inner.disk()?;
        let conn = match &self.inner.path {
            Some(path) => open_file_on(path, &disk).map_err(|e| {
                DbError::Unavailable(format!("cannot open the database {}: {e}", path.display()))
            })?,
            None => open_memory(&disk)?,
        };
        guarded(conn, &self.inner.bounds, disk)
    }
}

/// An in-memory database whose temporary files go through `disk`.
fn open_memory(disk: &Disk) -> Result<rusqlite::Connection, DbError> {
    rusqlite::Connection::open_with_flags_and_vfs(
        ":memory:",
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        disk.name(),
    )
    .map_err(unavailable)
}

/// [`open_file`] through `disk`, with the log kept small once it can be.
fn open_file_on(path: &Path, disk: &Disk) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags_and_vfs(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        disk.name(),
    )?;
    make_durable(&conn)?;
    conn.pragma_update(
        None,
        "journal_size_limit",
        journal_size_limit(disk.max_size()),
    )?;
    Ok(conn)
}

/// What the log is cut back to when it starts over: small beside the database's bound.
fn journal_size_limit(max_size: u64) -> i64 {
    (max_size / 8).min(16 * 1024 * 1024) as i64
}

impl StoreInner {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Guarded>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn disk(&self) -> Result<Arc<Disk>, DbError> {
        if let Some(disk) = self.disk.get() {
            return Ok(disk.clone());
        }
        let max_size = match self.path {
            Some(_) => self.bounds.max_size_bytes,
            None => u64::MAX,
        };
        let disk = Disk::new(self.path.as_deref(), self.bounds.max_temp_bytes, max_size)
            .map_err(unavailable)?;
        Ok(self.disk.get_or_init(|| disk).clone())
    }

    /// After a request: when the log has grown past what it is cut back to, try to move it
    /// into the database and empty it, without waiting for readers (a later request tries
    /// again), so that disk use comes back under the bound once no reader holds old pages.
    fn shrink_log(&self, conn: &rusqlite::Connection) {
        let Some(path) = &self.path else { return };
        let mut log = path.clone().into_os_string();
        log.push("-wal");
        let limit = journal_size_limit(self.bounds.max_size_bytes).max(0) as u64;
        if std::fs::metadata(&log).map_or(true, |m| m.len() <= limit) {
            return;
        }
        let _ = conn.busy_timeout(Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        let _ = conn.busy_timeout(BUSY_WAIT);
    }
}

/// `conn` with its limits, the host's functions and its guard.
fn guarded(
    mut conn: rusqlite::Connection,
    bounds: &Bounds,
    disk: Arc<Disk>,
) -> Result<Guarded, DbError> {
    configure(&conn, bounds)?;
    let counters = Arc::new(functions::Counters::default());
    functions::install(&conn, &counters).map_err(unavailable)?;
    let guard = Arc::new(guard::State::default());
    let hook = guard.clone();
    conn.authorizer(Some(move |context: rusqlite::hooks::AuthContext<'_>| {
        guard::authorize(&hook, context)
    }))
    .map_err(unavailable)?;
    Ok(Guarded {
        conn,
        guard,
        counters,
        disk,
    })
}

/// The limits every route connection has, whatever route code does.
fn configure(conn: &rusqlite::Connection, bounds: &Bounds) -> Result<(), DbError> {
    let set = || -> rusqlite::Result<()> {
        for &(limit, value, _) in LIMITS {
            conn.set_limit(limit, value)?;
        }
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let pages = (bounds.max_size_bytes / page_size.max(512) as u64).max(1);
        conn.pragma_update(None, "max_page_count", pages as i64)?;
        // The bundled SQLite enforces foreign keys by default; Python's sqlite3 does not.
        conn.execute_batch(RESET_PRAGMAS)?;
        Ok(())
    };
    set().map_err(unavailable)
}

/// A connection checked out for one request (or for the host).
pub struct Connection {
    conn: Option<rusqlite::Connection>,
    guard: Arc<guard::State>,
    counters: Arc<functions::Counters>,
    disk: Arc<Disk>,
    /// A private `:memory:` database, whose pages count against the request's memory bound.
    private_memory: bool,
    /// The pool it goes back to; `None` for a private in-memory database.
    home: Option<Arc<StoreInner>>,
    watch: Option<Watch>,
}

impl Connection {
    fn new(
        Guarded {
            mut conn,
            guard,
            counters,
            disk,
        }: Guarded,
        home: Option<Arc<StoreInner>>,
        watch: Option<Watch>,
    ) -> Result<Connection, DbError> {
        if let Some(watch) = &watch {
            let watch = watch.clone();
            conn.progress_handler(1000, Some(move || here_overdue() || !watch.keep_going()))
                .map_err(unavailable)?;
            // Nothing an earlier request did shows in `changes()`, `total_changes()` or
            // `last_insert_rowid()`.
            counters.restart(&conn);
        }
        Ok(Connection {
            conn: Some(conn),
            guard,
            counters,
            disk,
            private_memory: false,
            home,
            watch,
        })
    }

    /// Whether this is a private `:memory:` database.
    pub fn is_private_memory(&self) -> bool {
        self.private_memory
    }

    /// Let a private in-memory database hold at most `bytes` (what the request's other
    /// in-memory databases leave of its bound); it keeps what it holds already.
    pub fn limit_memory(&mut self, bytes: u64) -> Result<(), DbError> {
        let guard = self.guard.clone();
        let conn = self.raw()?;
        guard
            .trusted(|| -> rusqlite::Result<()> {
                let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
                let pages = (bytes / page_size.max(512) as u64).max(1);
                conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            })
            .map_err(unavailable)
    }

    /// Bytes a private in-memory database holds.
    pub fn memory_used(&mut self) -> u64 {
        let guard = self.guard.clone();
        let Ok(conn) = self.raw() else { return 0 };
        guard
            .trusted(|| -> rusqlite::Result<u64> {
                let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
                Ok((pages.max(0) as u64).saturating_mul(size.max(0) as u64))
            })
            .unwrap_or(0)
    }

    fn raw(&mut self) -> Result<&mut rusqlite::Connection, DbError> {
        self.conn
            .as_mut()
            .ok_or_else(|| DbError::Programming("Cannot operate on a closed database.".into()))
    }

    /// Run `op` as the host (the guard allows everything).
    pub fn trusted<T>(
        &mut self,
        op: impl FnOnce(&mut rusqlite::Connection) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        let guard = self.guard.clone();
        let conn = self.raw()?;
        let value = guard.trusted(|| op(conn));
        // What the host prepared must not be found again, unguarded, by route code's SQL.
        conn.flush_prepared_statement_cache();
        value
    }

    /// Run `script` as route code would (the guard stands), asking `check` about each
    /// statement first; a failure comes with the byte offset of its statement.
    pub fn run_untrusted_script(
        &mut self,
        script: &str,
        mut check: impl FnMut(&str) -> Result<(), DbError>,
    ) -> Result<(), (DbError, usize)> {
        let guard = self.guard.clone();
        let watch = self.watch.clone();
        let _running = Running::enter(&watch);
        let conn = self.raw().map_err(|e| (e, 0))?;
        run_script(conn, &guard, script, |_, sql| check(sql)).map_err(|failure| match failure {
            ScriptError::Sqlite(e, at) => (error(e, &guard, watch.as_ref()), at),
            ScriptError::Refused(e, at) => (e, at),
        })
    }

    /// Wait for other writers only as long as the request may still run.
    fn before_statement(&mut self) -> Result<(), DbError> {
        self.guard.take_altered();
        super::vfs::take_refusal();
        let wait = self.busy_wait();
        self.raw()?.busy_timeout(wait).map_err(unavailable)?;
        self.guard.take_denial();
        Ok(())
    }

    /// How long a statement may wait for another writer now.
    fn busy_wait(&self) -> Duration {
        match &self.watch {
            Some(watch) => watch
                .deadline
                .saturating_duration_since(Instant::now())
                .min(BUSY_WAIT),
            None => BUSY_WAIT,
        }
    }

    /// The outcome of a statement that returned nothing.
    pub fn idle_outcome(&mut self) -> Outcome {
        Outcome {
            changes: -1,
            in_transaction: self.conn.as_ref().is_some_and(|c| !c.is_autocommit()),
            ..Outcome::default()
        }
    }

    /// Whether no transaction is open (then `commit` and `rollback` have nothing to do).
    pub fn is_autocommit(&self) -> bool {
        self.conn.as_ref().is_none_or(|c| c.is_autocommit())
    }

    /// Run one statement with `params`, after `begin` if no transaction is open.
    pub fn execute(
        &mut self,
        sql: &str,
        params: &Params,
        begin: Option<&str>,
        allowance: &mut Allowance,
    ) -> Result<Outcome, DbError> {
        self.before_statement()?;
        self.statement(sql, params, begin, allowance, false)?
            .ok_or_else(|| DbError::Unavailable("the statement did not run".into()))
    }

    /// [`Self::execute`] on the calling thread, when the statement can run there without
    /// waiting; `None` when it must run on a database thread instead, with nothing of this
    /// attempt left behind (`allowance` untouched).
    ///
    /// Why this may run on a guest's thread: only a statement SQLite calls read-only
    /// (`sqlite3_stmt_readonly`) that starts with `SELECT`, `WITH`, `VALUES` or `PRAGMA` and
    /// needs no `BEGIN` first runs here, so it writes nothing to the database and never
    /// commits (no `fsync`); the busy handler is off (a lock another connection holds is an
    /// error at once, not a wait) and SQLite's own sleeps are skipped ([`vfs::without_waiting`]);
    /// after [`HERE_FOR`] the progress handler stops it. Each of those three sends the
    /// statement to a database thread, where it runs again from the start: being read-only and
    /// interrupted, it changed nothing and returned nothing (SQLite keeps an open transaction
    /// when a read-only statement is interrupted). What remains is reading the file's pages
    /// (from the log or the database, usually in the kernel's page cache), as a guest's own
    /// memory image is read. The stack: a guest's fiber stack keeps at least
    /// [`threads::STACK_BYTES`] below the deepest wasm frame for host calls, as much as a
    /// database thread has (`crate::sandbox::engine::FIBER_STACK`).
    pub fn execute_here(
        &mut self,
        sql: &str,
        params: &Params,
        begin: Option<&str>,
        allowance: &mut Allowance,
    ) -> Option<Result<Outcome, DbError>> {
        if self.private_memory {
            return None;
        }
        let keyword = guard::first_keyword(sql)?;
        if !["SELECT", "WITH", "VALUES", "PRAGMA"]
            .iter()
            .any(|k| keyword.eq_ignore_ascii_case(k))
        {
            return None;
        }
        let conn = self.conn.as_ref()?;
        if begin.is_some() && conn.is_autocommit() {
            return None;
        }
        conn.busy_timeout(Duration::ZERO).ok()?;
        self.guard.take_altered();
        super::vfs::take_refusal();
        self.guard.take_denial();
        let mut tried = Allowance {
            rows: allowance.rows,
            bytes: allowance.bytes,
        };
        GO_ELSEWHERE.set(false);
        HERE_UNTIL.set(Some(Instant::now() + HERE_FOR));
        let (ran, waited) =
            super::vfs::without_waiting(|| self.statement(sql, params, None, &mut tried, true));
        HERE_UNTIL.set(None);
        // What comes next (a commit, a statement on a database thread) may wait again.
        let wait = self.busy_wait();
        if let Some(conn) = self.conn.as_ref() {
            let _ = conn.busy_timeout(wait);
        }
        if GO_ELSEWHERE.take() || waited {
            self.guard.take_denial();
            super::vfs::take_refusal();
            return None;
        }
        let outcome = ran.transpose()?;
        *allowance = tried;
        Some(outcome)
    }

    /// Run one statement (after `begin`); with `here`, only if it is read-only (`None` if not).
    fn statement(
        &mut self,
        sql: &str,
        params: &Params,
        begin: Option<&str>,
        allowance: &mut Allowance,
        here: bool,
    ) -> Result<Option<Outcome>, DbError> {
        guard::check_statement(sql)?;
        let keyword = guard::first_keyword(sql);
        if keyword.is_none() && sql.trim().is_empty() {
            return Ok(Some(self.idle_outcome()));
        }
        self.begin(begin)?;
        let guard = self.guard.clone();
        let watch = self.watch.clone();
        let _running = Running::enter(&watch);
        let conn = self.raw()?;
        let (columns, rows) = {
            // A statement that may change the connection (a PRAGMA, a CREATE TEMP) is prepared
            // afresh every time, so the guard sees it every time and the pool undoes it; the
            // others come from the connection's statement cache.
            let (mut cached, mut fresh);
            let stmt: &mut rusqlite::Statement<'_> = if changes_connection(keyword) {
                fresh = conn
                    .prepare(sql)
                    .map_err(|e| error(e, &guard, watch.as_ref()))?;
                &mut fresh
            } else {
                cached = conn
                    .prepare_cached(sql)
                    .map_err(|e| error(e, &guard, watch.as_ref()))?;
                &mut cached
            };
            if here && !stmt.readonly() {
                return Ok(None);
            }
            let altering = SchemaCheck::begin(conn, &guard)?;
            let mut step = || -> Result<(Vec<String>, Vec<Vec<Value>>), DbError> {
                bind(stmt, params)?;
                let columns: Vec<String> = stmt.column_names().map(str::to_string).collect();
                let mut out = Vec::new();
                let mut rows = stmt.raw_query();
                loop {
                    let row = match rows.next() {
                        Ok(Some(row)) => row,
                        Ok(None) => break,
                        Err(e) => return Err(error(e, &guard, watch.as_ref())),
                    };
                    if allowance.rows == 0 {
                        return Err(DbError::Limit(
                        "this request's statements returned more rows than a request may receive (database.max_rows): page through them with LIMIT and OFFSET".into(),
                    ));
                    }
                    allowance.rows -= 1;
                    let mut values = Vec::with_capacity(columns.len());
                    for (index, name) in columns.iter().enumerate() {
                        let value = convert(row.get_ref(index).map_err(unavailable)?, name)?;
                        let cost = value.cost();
                        if cost > allowance.bytes {
                            return Err(DbError::Limit(
                            "this request's statements returned more bytes than a request may receive (database.max_result_mb): select fewer columns or rows".into(),
                        ));
                        }
                        allowance.bytes -= cost;
                        values.push(value);
                    }
                    out.push(values);
                }
                Ok((columns, out))
            };
            let stepped = step();
            if let Some(check) = altering {
                check.finish(conn, &guard, stepped.is_ok())?;
            }
            stepped?
        };
        let changes = if guard::changes_rows(keyword) {
            conn.changes() as i64
        } else {
            -1
        };
        let last_row_id =
            (guard::inserts(keyword) && changes > 0).then(|| conn.last_insert_rowid());
        Ok(Some(Outcome {
            columns,
            rows,
            changes,
            last_row_id,
            in_transaction: !conn.is_autocommit(),
        }))
    }

    /// Run one data-changing statement once per parameter set.
    pub fn execute_many(
        &mut self,
        sql: &str,
        params: &[Params],
        begin: Option<&str>,
    ) -> Result<Outcome, DbError> {
        self.before_statement()?;
        guard::check_statement(sql)?;
        if !guard::changes_rows(guard::first_keyword(sql)) {
            return Err(DbError::Programming(
                "executemany() can only execute DML statements.".into(),
            ));
        }
        self.begin(begin)?;
        let guard = self.guard.clone();
        let watch = self.watch.clone();
        let _running = Running::enter(&watch);
        let conn = self.raw()?;
        let mut changes = 0i64;
        {
            let mut stmt = conn
                .prepare_cached(sql)
                .map_err(|e| error(e, &guard, watch.as_ref()))?;
            for set in params {
                bind(&mut stmt, set)?;
                let mut rows = stmt.raw_query();
                // A RETURNING clause's rows are not kept (as DB-API's executemany).
                loop {
                    match rows.next() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => return Err(error(e, &guard, watch.as_ref())),
                    }
                }
                drop(rows);
                changes += conn.changes() as i64;
            }
        }
        Ok(Outcome {
            changes,
            in_transaction: !conn.is_autocommit(),
            ..Outcome::default()
        })
    }

    /// Commit what is pending, then run every statement of `script`.
    pub fn execute_script(&mut self, script: &str) -> Result<Outcome, DbError> {
        self.before_statement()?;
        self.commit()?;
        let guard = self.guard.clone();
        let watch = self.watch.clone();
        let _running = Running::enter(&watch);
        let conn = self.raw()?;
        let before = conn.total_changes();
        run_script(conn, &guard, script, |_, sql| guard::check_statement(sql)).map_err(
            |failure| match failure {
                ScriptError::Sqlite(e, _) => error(e, &guard, watch.as_ref()),
                ScriptError::Refused(e, _) => e,
            },
        )?;
        let changes = conn.total_changes().saturating_sub(before) as i64;
        Ok(Outcome {
            changes,
            ..self.idle_outcome()
        })
    }

    pub fn commit(&mut self) -> Result<(), DbError> {
        self.end("COMMIT")
    }

    pub fn rollback(&mut self) -> Result<(), DbError> {
        self.end("ROLLBACK")
    }

    fn end(&mut self, verb: &str) -> Result<(), DbError> {
        let guard = self.guard.clone();
        let watch = self.watch.clone();
        let conn = self.raw()?;
        if !conn.is_autocommit() {
            conn.execute_batch(verb)
                .map_err(|e| error(e, &guard, watch.as_ref()))?;
        }
        Ok(())
    }

    fn begin(&mut self, begin: Option<&str>) -> Result<(), DbError> {
        let Some(begin) = begin else {
            return Ok(());
        };
        guard::check_begin(begin)?;
        let guard = self.guard.clone();
        let watch = self.watch.clone();
        let conn = self.raw()?;
        if conn.is_autocommit() {
            conn.execute_batch(begin)
                .map_err(|e| error(e, &guard, watch.as_ref()))?;
        }
        Ok(())
    }
}

impl Drop for Connection {
    /// Roll back, reset and return the connection to its pool (or close it).
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let Some(home) = self.home.take() else {
            return;
        };
        // Route code's PRAGMAs and temporary objects are undone only where it made them (the
        // guard saw them being prepared): a plain request costs a check of `is_autocommit`.
        let changed = self.guard.take_changed();
        let clean = self.guard.trusted(|| -> rusqlite::Result<bool> {
            let _ = conn.progress_handler(0, None::<fn() -> bool>);
            if !conn.is_autocommit() {
                conn.execute_batch("ROLLBACK")?;
            }
            home.shrink_log(&conn);
            if !changed {
                return Ok(conn.is_autocommit());
            }
            let temporary: i64 =
                conn.query_row("SELECT count(*) FROM temp.sqlite_master", [], |r| r.get(0))?;
            conn.execute_batch(RESET_PRAGMAS)?;
            Ok(temporary == 0 && conn.is_autocommit())
        });
        if clean.unwrap_or(false) {
            let mut idle = home.idle();
            if idle.len() < MAX_IDLE {
                idle.push(Guarded {
                    conn,
                    guard: self.guard.clone(),
                    counters: self.counters.clone(),
                    disk: self.disk.clone(),
                });
            }
        }
    }
}

/// Whether a statement starting with `keyword` may change the connection itself, or must be
/// seen by the guard every time it runs (an `ALTER TABLE`, see [`SchemaCheck`]).
fn changes_connection(keyword: Option<&str>) -> bool {
    keyword.is_some_and(|k| {
        ["PRAGMA", "CREATE", "ALTER"]
            .iter()
            .any(|w| k.eq_ignore_ascii_case(w))
    })
}

/// Route code's `ALTER TABLE`, run inside a savepoint: SQLite's authorizer is told the table's
/// old name only, so the statement is undone (and refused) when it left an object with one of
/// the host's names that was not there before. The check reads the schema, not the text.
struct SchemaCheck {
    before: Vec<String>,
}

const ALTER_SAVEPOINT: &str = "_filerouter_alter";

impl SchemaCheck {
    /// After preparing a statement: `Some` when it alters a table (the savepoint is open).
    fn begin(
        conn: &rusqlite::Connection,
        guard: &guard::State,
    ) -> Result<Option<SchemaCheck>, DbError> {
        if !guard.take_altered() {
            return Ok(None);
        }
        guard
            .trusted(|| {
                conn.execute_batch(&format!("SAVEPOINT {ALTER_SAVEPOINT}"))?;
                host_names(conn)
            })
            .map(|before| Some(SchemaCheck { before }))
            .map_err(unavailable)
    }

    /// After running it (`ran`: without an error): keep it, or undo it.
    fn finish(
        self,
        conn: &rusqlite::Connection,
        guard: &guard::State,
        ran: bool,
    ) -> Result<(), DbError> {
        let taken = guard
            .trusted(|| -> rusqlite::Result<Option<String>> {
                let taken = host_names(conn)?
                    .into_iter()
                    .find(|name| !self.before.contains(name));
                if taken.is_some() || !ran {
                    conn.execute_batch(&format!("ROLLBACK TO {ALTER_SAVEPOINT}"))?;
                }
                conn.execute_batch(&format!("RELEASE {ALTER_SAVEPOINT}"))?;
                Ok(taken)
            })
            .map_err(unavailable)?;
        match taken {
            None => Ok(()),
            Some(name) => Err(DbError::Refused(format!(
                "the name {name} belongs to filerouter (its tables start with {}): route code cannot rename a table to it",
                guard::HOST_TABLE_PREFIX
            ))),
        }
    }
}

/// The schema's objects (main and temp) whose names are the host's.
fn host_names(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM main.sqlite_schema UNION ALL SELECT name FROM temp.sqlite_schema",
    )?;
    let names = stmt.query_map([], |row| row.get::<_, String>(0))?;
    let mut host = Vec::new();
    for name in names {
        let name = name?;
        if guard::is_host_name(&name) {
            host.push(name);
        }
    }
    Ok(host)
}

/// Why a script stopped: SQLite's error or the guard's refusal, with the byte offset of the
/// statement in the script.
pub enum ScriptError {
    Sqlite(rusqlite::Error, usize),
    Refused(DbError, usize),
}

/// Run every statement of `script` in turn, asking `check` about each (its offset in the
/// script and its text) first. Rows are stepped through and dropped.
pub fn run_script(
    conn: &rusqlite::Connection,
    guard: &guard::State,
    script: &str,
    mut check: impl FnMut(usize, &str) -> Result<(), DbError>,
) -> Result<(), ScriptError> {
    use rusqlite::fallible_iterator::FallibleIterator;
    let mut batch = rusqlite::Batch::new(conn, script);
    let mut searched = 0;
    loop {
        let mut stmt = match batch.next() {
            Ok(Some(stmt)) => stmt,
            Ok(None) => return Ok(()),
            Err(e) => return Err(ScriptError::Sqlite(e, next_statement(script, searched))),
        };
        let text = stmt.expanded_sql().unwrap_or_default();
        let at = script[searched..]
            .find(text.trim())
            .map_or(searched, |found| searched + found);
        searched = (at + text.trim().len()).min(script.len());
        check(at, &text).map_err(|e| ScriptError::Refused(e, at))?;
        let altering = SchemaCheck::begin(conn, guard).map_err(|e| ScriptError::Refused(e, at))?;
        let mut rows = stmt.raw_query();
        let stepped = loop {
            match rows.next() {
                Ok(Some(_)) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(ScriptError::Sqlite(e, at)),
            }
        };
        drop(rows);
        if let Some(check) = altering {
            check
                .finish(conn, guard, stepped.is_ok())
                .map_err(|e| ScriptError::Refused(e, at))?;
        }
        stepped?;
    }
}

/// Where the statement after byte `from` starts (past white space, comments and a `;`).
fn next_statement(script: &str, from: usize) -> usize {
    let rest = &script[from..];
    from + (rest.len() - guard::skip_space_and_comments(rest).len())
}

fn bind(stmt: &mut rusqlite::Statement<'_>, params: &Params) -> Result<(), DbError> {
    stmt.clear_bindings();
    let count = stmt.parameter_count();
    match params {
        Params::None | Params::Positional(_) => {
            let values: &[Value] = match params {
                Params::Positional(values) => values,
                _ => &[],
            };
            if values.len() != count {
                return Err(DbError::Programming(format!(
                    "Incorrect number of bindings supplied. The current statement uses {count}, and there are {} supplied.",
                    values.len()
                )));
            }
            for (index, value) in values.iter().enumerate() {
                bind_one(stmt, index + 1, value)?;
            }
        }
        Params::Named(values) => {
            for index in 1..=count {
                let Some(name) = stmt.parameter_name(index).map(str::to_string) else {
                    return Err(DbError::Programming(format!(
                        "Binding {index} has no name, but you supplied a dictionary (which has only names)."
                    )));
                };
                let bare = name.get(1..).unwrap_or_default();
                let value = values
                    .iter()
                    .find(|(key, _)| key == bare)
                    .map(|(_, value)| value)
                    .ok_or_else(|| {
                        DbError::Programming(format!(
                            "You did not supply a value for binding parameter {name}."
                        ))
                    })?;
                bind_one(stmt, index, value)?;
            }
        }
    }
    Ok(())
}

fn bind_one(
    stmt: &mut rusqlite::Statement<'_>,
    index: usize,
    value: &Value,
) -> Result<(), DbError> {
    let bound = match value {
        Value::Null => stmt.raw_bind_parameter(index, rusqlite::types::Null),
        Value::Integer(i) => stmt.raw_bind_parameter(index, i),
        Value::Real(f) => stmt.raw_bind_parameter(index, f),
        Value::Text(text) => stmt.raw_bind_parameter(index, text.as_str()),
        Value::Blob(blob) => stmt.raw_bind_parameter(index, blob.as_slice()),
    };
    bound.map_err(|e| DbError::Data(format!("Error binding parameter {index}: {e}")))
}

fn convert(value: ValueRef<'_>, column: &str) -> Result<Value, DbError> {
    Ok(match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Integer(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(bytes) => Value::Text(String::from_utf8(bytes.to_vec()).map_err(|_| {
            DbError::Operational(format!(
                "Could not decode to UTF-8 column '{column}': it holds bytes that are not text (CAST it AS BLOB)"
            ))
        })?),
        ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
    })
}

fn unavailable(e: impl std::fmt::Display) -> DbError {
    DbError::Unavailable(e.to_string())
}

/// SQLite's error as the DB-API exception Python's `sqlite3` raises for it, with the guard's
/// reason when the guard refused, and the bound that was hit when one was.
pub fn error(e: rusqlite::Error, guard: &guard::State, watch: Option<&Watch>) -> DbError {
    // In `Connection::execute_here`: a lock held elsewhere sends the statement to a database
    // thread, where it may wait.
    if HERE_UNTIL.get().is_some()
        && matches!(
            e.sqlite_error_code(),
            Some(ffi::ErrorCode::DatabaseBusy | ffi::ErrorCode::DatabaseLocked)
        )
    {
        GO_ELSEWHERE.set(true);
    }
    if let Some(reason) = guard.take_denial() {
        return DbError::Refused(reason);
    }
    match e {
        rusqlite::Error::SqliteFailure(failure, message) => {
            let message = message.unwrap_or_else(|| failure.to_string());
            match failure.code {
                ffi::ErrorCode::ConstraintViolation | ffi::ErrorCode::TypeMismatch => {
                    DbError::Integrity(message)
                }
                ffi::ErrorCode::TooBig => DbError::Data(message),
                ffi::ErrorCode::OperationInterrupted => match watch {
                    Some(w) if w.cancelled.load(Ordering::Relaxed) => {
                        DbError::Limit("the request ended while the statement ran".into())
                    }
                    Some(w)
                        if w.budget.as_ref().and_then(|b| b.overrun()).is_some_and(|o| {
                            o.limit == crate::scheduler::Limit::Cpu
                        }) =>
                    {
                        DbError::Limit(
                            "the statement was stopped: the request used up its CPU time (sandbox.cpu_ms)".into(),
                        )
                    }
                    _ => DbError::Limit(
                        "the statement ran past the request's time limit (sandbox.wall_s) and was stopped".into(),
                    ),
                },
                ffi::ErrorCode::DiskFull => match super::vfs::take_refusal() {
                    Some(super::vfs::Refusal::Temp) => DbError::Limit(
                        "the database's temporary files (temporary tables, large sorts) reached their bound (database.max_temp_mb), shared by all requests of the project".into(),
                    ),
                    Some(super::vfs::Refusal::Log) => DbError::Limit(
                        "the database is full: the file and its write-ahead log together reached the size limit (database.max_size_mb); the log shrinks once no request reads old pages, so a smaller write or a later one may fit".into(),
                    ),
                    None => DbError::Limit(
                        "the database is full: it reached its size limit (database.max_size_mb), or the disk is full".into(),
                    ),
                },
                ffi::ErrorCode::AuthorizationForStatementDenied => DbError::Refused(message),
                ffi::ErrorCode::ApiMisuse | ffi::ErrorCode::ParameterOutOfRange => {
                    DbError::Programming(message)
                }
                ffi::ErrorCode::DatabaseBusy | ffi::ErrorCode::DatabaseLocked => {
                    DbError::Operational(format!(
                        "{message} (another request held the write lock for longer than this one could wait)"
                    ))
                }
                _ => DbError::Operational(message),
            }
        }
        rusqlite::Error::MultipleStatement => {
            DbError::Programming("You can only execute one statement at a time.".into())
        }
        rusqlite::Error::InvalidParameterCount(given, expected) => DbError::Programming(format!(
            "Incorrect number of bindings supplied. The current statement uses {expected}, and there are {given} supplied."
        )),
        other => DbError::Operational(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Watch {
            deadline: Instant::now() + Duration::from_secs(30),
            cancelled: Arc::new(AtomicBool::new(false)),
            budget: None,
        }
    }

    fn allowance() -> Allowance {
        Allowance {
            rows: 1000,
            bytes: 1 << 20,
        }
    }

    /// A store on a fresh file with a table `t` of three rows, and one of its connections.
    fn store() -> (tempfile::TempDir, Store, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::file(&dir.path().join("db.sqlite3"), Bounds::default()).unwrap();
        let mut conn = store.checkout_idle(watch()).unwrap().unwrap();
        conn.execute_script("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
            .unwrap();
        (dir, store, conn)
    }

    fn here(conn: &mut Connection, sql: &str) -> Option<Result<Outcome, DbError>> {
        conn.execute_here(sql, &Params::None, None, &mut allowance())
    }

    #[test]
    fn reads_run_here_and_everything_else_is_declined() {
        let (_dir, _store, mut conn) = store();
        let read = here(&mut conn, "SELECT count(*) FROM t").unwrap().unwrap();
        assert_eq!(read.rows, vec![vec![Value::Integer(3)]]);
        let pragma = here(&mut conn, "PRAGMA foreign_keys = ON");
        assert!(matches!(pragma, Some(Ok(_))), "{pragma:?}");
        for write in [
            "INSERT INTO t VALUES (4)",
            "WITH n AS (SELECT 5) INSERT INTO t SELECT * FROM n",
            "PRAGMA user_version = 3",
            "BEGIN IMMEDIATE",
            "COMMIT",
            "CREATE TABLE u (y)",
        ] {
            assert!(here(&mut conn, write).is_none(), "{write}");
        }
        // Nothing of the declined statements happened.
        let read = here(&mut conn, "SELECT count(*) FROM t").unwrap().unwrap();
        assert_eq!(read.rows, vec![vec![Value::Integer(3)]]);
        // A read that needs a BEGIN first goes to a database thread as well.
        let begin = conn.execute_here("SELECT 1", &Params::None, Some("BEGIN"), &mut allowance());
        assert!(begin.is_none());
        // Errors of statements that ran here are the statements' own.
        let missing = here(&mut conn, "SELECT * FROM nowhere").unwrap();
        assert!(
            matches!(missing, Err(DbError::Operational(_))),
            "{missing:?}"
        );
    }

    #[test]
    fn a_long_read_gives_up_here_and_runs_whole_elsewhere() {
        let (_dir, _store, mut conn) = store();
        let long = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) SELECT count(*) FROM n";
        let started = Instant::now();
        let mut left = allowance();
        let declined = conn.execute_here(long, &Params::None, None, &mut left);
        assert!(declined.is_none(), "{declined:?}");
        assert_eq!(left.rows, 1000, "the attempt used none of the allowance");
        assert!(
            started.elapsed() < HERE_FOR + Duration::from_millis(50),
            "{:?}",
            started.elapsed()
        );
        let ran = conn
            .execute(long, &Params::None, None, &mut allowance())
            .unwrap();
        assert_eq!(ran.rows, vec![vec![Value::Integer(3_000_000)]]);
        // In an open transaction too, and the transaction stays open.
        conn.execute(
            "INSERT INTO t VALUES (9)",
            &Params::None,
            Some("BEGIN"),
            &mut allowance(),
        )
        .unwrap();
        assert!(here(&mut conn, long).is_none());
        assert!(!conn.is_autocommit());
        let read = here(&mut conn, "SELECT count(*) FROM t").unwrap().unwrap();
        assert_eq!(read.rows, vec![vec![Value::Integer(4)]]);
        conn.rollback().unwrap();
    }
}
