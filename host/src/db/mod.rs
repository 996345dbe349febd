//! The project's SQL database, which route code reaches through the guest's `sqlite3` module.
//!
//! Once per project (or tenant) there is one [`Database`]: a SQLite file in the project's data
//! folder, which `build` and `clean` never touch, or, when the operator names one, a Postgres
//! database that several `filerouter run` processes share ([`postgres`]; route code's API is
//! the same). Once per request there is one [`Session`]: the connections the request opened,
//! its share of the [`Bounds`], and its deadline. When the session is dropped (the request
//! ended, failed, trapped or ran out of time), every connection's uncommitted work is rolled
//! back and the connection goes back to the pool, reset.
//!
//! [`guard`] decides which statements route code may run (nothing that reaches outside the
//! database: no `ATTACH`, `load_extension`, `VACUUM`, file or safety PRAGMAs, or the host's own
//! `_filerouter_` tables); [`sqlite`] runs them; [`postgres`] runs them on Postgres, after
//! [`pg_text`] rewrote their placeholders; [`migrations`] applies the project's
//! `migrations/*.sql` to either; [`backup`] copies a SQLite database while it serves, and
//! restores one. Not for: key-value state (that is [`crate::kv`], which keeps
//! its table in the same SQLite file, or on Redis), nor running any Python.

pub mod backup;
pub mod functions;
pub mod guard;
pub mod migrations;
pub mod pg_text;
pub mod postgres;
pub mod sqlite;
pub mod threads;
pub mod vfs;

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

/// One SQL value, as SQLite's storage classes have them.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    /// What the value costs against [`Bounds::max_bytes`].
    pub(crate) fn cost(&self) -> usize {
        match self {
            Value::Null => 1,
            Value::Integer(_) | Value::Real(_) => 8,
            Value::Text(text) => text.len() + 1,
            Value::Blob(blob) => blob.len() + 1,
        }
    }
}

/// A statement's parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    None,
    /// For `?` placeholders, in order.
    Positional(Vec<Value>),
    /// For `:name` (or `@name`, `$name`) placeholders, by name without the sign.
    Named(Vec<(String, Value)>),
}

/// What a statement did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    /// Rows changed by a data-changing statement; -1 for any other statement.
    pub changes: i64,
    /// The rowid of the row an INSERT or REPLACE just inserted.
    pub last_row_id: Option<i64>,
    pub in_transaction: bool,
}

/// Why a statement failed, by the DB-API exception it becomes in Python.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DbError {
    /// A constraint failed (`IntegrityError`).
    #[error("{0}")]
    Integrity(String),
    /// The database could not do it (`OperationalError`).
    #[error("{0}")]
    Operational(String),
    /// The call was wrong (`ProgrammingError`).
    #[error("{0}")]
    Programming(String),
    /// A value out of range (`DataError`).
    #[error("{0}")]
    Data(String),
    /// The sandbox refuses the statement: it reaches outside the database.
    #[error("{0}")]
    Refused(String),
    /// A bound of the request or the project.
    #[error("{0}")]
    Limit(String),
    /// The backend failed or cannot be reached.
    #[error("{0}")]
    Unavailable(String),
}

/// The bounds of one project's database and of each request's use of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Rows all statements of one request may return together.
    pub max_rows: usize,
    /// Bytes all statements of one request may return together (text and blobs by length,
    /// numbers 8 each).
    pub max_bytes: usize,
    /// The database file and its write-ahead log together.
    pub max_size_bytes: u64,
    /// The database's temporary files (temporary tables, large sorts, statement journals)
    /// at once, for all requests of the project together.
    pub max_temp_bytes: u64,
    /// The private `:memory:` databases of one request, together.
    pub max_memory_bytes: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_rows: 50_000,
            max_bytes: 32 * 1024 * 1024,
            max_size_bytes: 1024 * 1024 * 1024,
            max_temp_bytes: 256 * 1024 * 1024,
            max_memory_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Connections one request may have open at once.
pub const MAX_CONNECTIONS: usize = 16;

/// One project's database.
pub struct Database {
    backend: Backend,
    bounds: Bounds,
    /// No file, but private `:memory:` databases may be opened: the build's (see
    /// [`Database::for_build`]).
    private_memory: bool,
}

/// Where the database is.
enum Backend {
    /// A SQLite file in the data folder (or none: [`Database::none`]).
    Sqlite(sqlite::Store),
    /// The operator's Postgres server; `memory` makes route code's private `:memory:`
    /// databases, which stay SQLite.
    Postgres {
        pool: postgres::Pool,
        memory: sqlite::Store,
    },
}

/// The file name of the project's database in its data folder.
pub const FILE_NAME: &str = "db.sqlite3";

impl Database {
    /// The database in `data_dir/db.sqlite3`, created (with the folder) if missing.
    pub fn open(data_dir: &Path, bounds: Bounds) -> Result<Database, DbError> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            DbError::Unavailable(format!(
                "cannot create the data folder {}: {e}",
                data_dir.display()
            ))
        })?;
        Ok(Database {
            backend: Backend::Sqlite(sqlite::Store::file(&data_dir.join(FILE_NAME), bounds)?),
            bounds,
            private_memory: false,
        })
    }

    /// The Postgres database at `url` (`postgres://user:password@host:port/db`), connected to
    /// once now: a wrong URL or an unreachable server is an error that names `host:port/db`
    /// (never the password). `bounds.max_size_bytes` does not apply: the server's operator
    /// sizes the database.
    pub async fn connect_postgres(
        url: &str,
        bounds: Bounds,
        pool: postgres::PoolSettings,
    ) -> Result<Database, DbError> {
        Ok(Database {
            backend: Backend::Postgres {
                pool: postgres::Pool::connect(url, pool).await?,
                memory: sqlite::Store::memory(bounds),
            },
            bounds,
            private_memory: false,
        })
    }

    /// No database: route code's `connect` is refused with a message (for `build`, where
    /// route modules are imported but no request runs, and for the server's own calls).
    pub fn none() -> Database {
        Database {
            backend: Backend::Sqlite(sqlite::Store::memory(Bounds::default())),
            bounds: Bounds::default(),
            private_memory: false,
        }
    }

    /// The build's: no project database (a name is refused as by [`Database::none`]), but
    /// private `:memory:` databases open, for the guest's warm-up of its `sqlite3` module
    /// (`guest-python/sandbox/warmup.py`). One still open when the snapshot is taken is an
    /// error of the build ([`Session::open_connections`]): its handle would be stale in every
    /// request.
    pub fn for_build() -> Database {
        Database {
            private_memory: true,
            ..Database::none()
        }
    }

    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// The same database under other bounds (a tenant reconfigured).
    pub fn with_bounds(&self, bounds: Bounds) -> Result<Database, DbError> {
        let backend = match &self.backend {
            Backend::Sqlite(store) => Backend::Sqlite(store.with_bounds(bounds)?),
            Backend::Postgres { pool, .. } => Backend::Postgres {
                pool: pool.clone(),
                memory: sqlite::Store::memory(bounds),
            },
        };
        Ok(Database {
            backend,
            bounds,
            private_memory: self.private_memory,
        })
    }

    /// The file, for a SQLite database that has one.
    pub fn path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Sqlite(store) => store.path(),
            Backend::Postgres { .. } => None,
        }
    }

    /// The Postgres database's pool, when that is where the database is.
    pub fn postgres(&self) -> Option<&postgres::Pool> {
        match &self.backend {
            Backend::Postgres { pool, .. } => Some(pool),
            Backend::Sqlite(_) => None,
        }
    }

    /// Where the database is, for messages: the SQLite file, or Postgres's `host:port/db`.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sqlite(store) => store.path().map_or_else(
                || "no database (in-memory)".to_string(),
                |p| p.display().to_string(),
            ),
            Backend::Postgres { pool, .. } => format!("postgres at {}", pool.target()),
        }
    }

    /// A request's use of the database, until `deadline`.
    pub fn session(self: &Arc<Self>, deadline: Instant) -> Session {
        Session {
            db: self.clone(),
            connections: Vec::new(),
            rows_left: self.bounds.max_rows,
            bytes_left: self.bounds.max_bytes,
            deadline,
            cancelled: Arc::new(AtomicBool::new(false)),
            budget: None,
            memory_held: Vec::new(),
            here: false,
        }
    }

    /// Run `op` with a connection of the host's own (migrations, status) on a blocking thread;
    /// the guard stands unless `op` asks [`sqlite::Connection::trusted`]. SQLite only.
    pub async fn with_connection<T, F>(&self, op: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut sqlite::Connection) -> T + Send + 'static,
    {
        let Backend::Sqlite(store) = &self.backend else {
            return Err(DbError::Unavailable(
                "the project's database is in Postgres, not in a SQLite file".into(),
            ));
        };
        let store = store.clone();
        threads::run(move || {
            let mut conn = store.checkout(None)?;
            Ok(op(&mut conn))
        })
        .await
        .map_err(thread_failed)?
    }
}

/// One connection of a request.
enum Connection {
    Sqlite(sqlite::Connection),
    Postgres(postgres::Connection),
}

/// One request's connections and its share of the bounds.
pub struct Session {
    db: Arc<Database>,
    connections: Vec<Option<Connection>>,
    rows_left: usize,
    bytes_left: usize,
    deadline: Instant,
    /// Set when the session ends: a statement still running on a database thread stops.
    cancelled: Arc<AtomicBool>,
    /// The request's time budget, which the statements' CPU is charged to.
    budget: Option<crate::scheduler::Budget>,
    /// What each open private in-memory database holds, by connection.
    memory_held: Vec<(u32, u64)>,
    /// Whether SQLite's reads that cannot wait may run on the calling thread
    /// ([`Session::run_reads_here`]).
    here: bool,
}

impl Session {
    /// How many of the session's connections are open.
    pub fn open_connections(&self) -> usize {
        self.connections.iter().flatten().count()
    }

    /// Whether the request's database is in Postgres (else in SQLite).
    pub fn database_is_postgres(&self) -> bool {
        self.db.postgres().is_some()
    }

    /// Let the request's statements run until `deadline` instead (a request whose response
    /// streams lasts as long as its stream may); connections opened already keep theirs.
    pub fn extend_deadline(&mut self, deadline: Instant) {
        self.deadline = self.deadline.max(deadline);
    }

    /// Charge the CPU of this request's statements to `budget` (the request's, which also
    /// charges its tenant), and stop a statement when the request is past its CPU limit.
    pub fn set_budget(&mut self, budget: crate::scheduler::Budget) {
        self.budget = Some(budget);
    }

    /// Let checkouts of idle connections and read-only statements that cannot wait run on the
    /// calling thread (`sqlite::Connection::execute_here` says why that thread never waits
    /// on a lock or a commit, and what it does when a statement would) instead of being
    /// handed to a database thread and back. For the sandbox's guest threads, which are
    /// threads of their own, not the async runtime's: a request's first statement cost two
    /// such hand-offs before.
    pub fn run_reads_here(&mut self) {
        self.here = true;
    }

    /// Open a connection: `:memory:` a private in-memory database, any other name the
    /// project's database. Returns its handle.
    pub async fn open(&mut self, name: &str) -> Result<u32, DbError> {
        if self.connections.iter().flatten().count() >= MAX_CONNECTIONS {
            return Err(DbError::Limit(format!(
                "a request may have at most {MAX_CONNECTIONS} database connections open; close() the ones it no longer needs"
            )));
        }
        let memory = matches!(name.trim(), ":memory:" | "") || name.starts_with("file::memory:");
        // No file: the server is importing route modules. A connection kept in the build's
        // snapshot would be a stale handle in every request (the build's private in-memory
        // ones are checked closed before the snapshot).
        if let Backend::Sqlite(store) = &self.db.backend
            && store.path().is_none()
            && !(memory && self.db.private_memory)
        {
            return Err(DbError::Unavailable(
                "the database is not open while the server imports route modules (`filerouter build`, route inspection): connect inside a handler or a dependency, and create tables with migrations/*.sql".into(),
            ));
        }
        let watch = sqlite::Watch {
            deadline: self.deadline,
            cancelled: self.cancelled.clone(),
            budget: self.budget.clone(),
        };
        // An idle connection of the pool is taken here; opening one waits on the disk.
        let idle = match &self.db.backend {
            Backend::Sqlite(store) if self.here && !memory => store.checkout_idle(watch.clone()),
            _ => None,
        };
        let conn = match (&self.db.backend, idle) {
            (_, Some(conn)) => Connection::Sqlite(conn?),
            (Backend::Postgres { pool, .. }, None) if !memory => {
                Connection::Postgres(pool.checkout(self.deadline).await?)
            }
            (Backend::Postgres { memory: store, .. } | Backend::Sqlite(store), None) => {
                let store = store.clone();
                let conn = threads::run(move || {
                    if memory {
                        store.private_memory(watch)
                    } else {
                        store.checkout(Some(watch))
                    }
                })
                .await
                .map_err(thread_failed)??;
                Connection::Sqlite(conn)
            }
        };
        let slot = match self.connections.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.connections.push(None);
                self.connections.len() - 1
            }
        };
        self.connections[slot] = Some(conn);
        Ok(slot as u32)
    }

    /// Whether connection `id` is a Postgres one (else SQLite); an error if it is closed.
    fn is_postgres(&self, id: u32) -> Result<bool, DbError> {
        match self.connections.get(id as usize) {
            Some(Some(Connection::Postgres(_))) => Ok(true),
            Some(Some(Connection::Sqlite(_))) => Ok(false),
            _ => Err(closed()),
        }
    }

    /// Postgres connection `id` and the request's allowance.
    fn postgres(&mut self, id: u32) -> Result<(&mut postgres::Connection, Allowance), DbError> {
        let allowance = Allowance {
            rows: self.rows_left,
            bytes: self.bytes_left,
        };
        match self.connections.get_mut(id as usize) {
            Some(Some(Connection::Postgres(conn))) => Ok((conn, allowance)),
            _ => Err(closed()),
        }
    }

    /// Run `op` on SQLite connection `id` on a database thread, and take the connection back
    /// after.
    async fn on<T, F>(&mut self, id: u32, op: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut sqlite::Connection, &mut Allowance) -> Result<T, DbError> + Send + 'static,
    {
        let slot = self.connections.get_mut(id as usize).ok_or_else(closed)?;
        let mut conn = match slot.take() {
            Some(Connection::Sqlite(conn)) => conn,
            other => {
                *slot = other;
                return Err(closed());
            }
        };
        let mut allowance = Allowance {
            rows: self.rows_left,
            bytes: self.bytes_left,
        };
        // A private in-memory database may hold what the request's others leave of the bound.
        let memory = conn.is_private_memory().then(|| {
            let others: u64 = self
                .memory_held
                .iter()
                .filter(|(other, _)| *other != id)
                .map(|(_, held)| held)
                .sum();
            self.db.bounds.max_memory_bytes.saturating_sub(others)
        });
        let (conn, allowance, held, result) = threads::run(move || {
            let result = match memory {
                Some(left) => conn
                    .limit_memory(left)
                    .and_then(|()| op(&mut conn, &mut allowance)),
                None => op(&mut conn, &mut allowance),
            };
            let held = memory.map(|_| conn.memory_used());
            (conn, allowance, held, result)
        })
        .await
        .map_err(thread_failed)?;
        self.rows_left = allowance.rows;
        self.bytes_left = allowance.bytes;
        if let Some(held) = held {
            self.memory_held.retain(|(other, _)| *other != id);
            self.memory_held.push((id, held));
        }
        self.connections[id as usize] = Some(Connection::Sqlite(conn));
        result.map_err(|e| match e {
            DbError::Limit(message) if memory.is_some() && message.starts_with("the database is full") => {
                DbError::Limit(format!(
                    "the request's in-memory databases are full: together they may hold {} MiB (database.max_memory_mb)",
                    self.db.bounds.max_memory_bytes >> 20
                ))
            }
            other => other,
        })
    }

    pub async fn execute(
        &mut self,
        id: u32,
        statement: String,
        params: Params,
        begin: Option<String>,
    ) -> Result<Outcome, DbError> {
        if self.is_postgres(id)? {
            let (conn, mut allowance) = self.postgres(id)?;
            let result = conn
                .execute(&statement, &params, begin.as_deref(), &mut allowance)
                .await;
            self.rows_left = allowance.rows;
            self.bytes_left = allowance.bytes;
            return result;
        }
        if self.here
            && let Some(done) = self.here(id, |conn, allowance| {
                conn.execute_here(&statement, &params, begin.as_deref(), allowance)
            })
        {
            return done;
        }
        self.on(id, move |conn, allowance| {
            conn.execute(&statement, &params, begin.as_deref(), allowance)
        })
        .await
    }

    /// Run `op` on SQLite connection `id` on this thread; `None` when it declined (then the
    /// caller runs the work on a database thread).
    fn here<T>(
        &mut self,
        id: u32,
        op: impl FnOnce(&mut sqlite::Connection, &mut Allowance) -> Option<Result<T, DbError>>,
    ) -> Option<Result<T, DbError>> {
        let mut allowance = Allowance {
            rows: self.rows_left,
            bytes: self.bytes_left,
        };
        let Some(Some(Connection::Sqlite(conn))) = self.connections.get_mut(id as usize) else {
            return None;
        };
        let done = op(conn, &mut allowance)?;
        self.rows_left = allowance.rows;
        self.bytes_left = allowance.bytes;
        Some(done)
    }

    /// Whether SQLite connection `id` has no transaction open (nothing to commit or roll
    /// back: no need for a database thread).
    fn sqlite_idle(&self, id: u32) -> bool {
        matches!(
            self.connections.get(id as usize),
            Some(Some(Connection::Sqlite(conn))) if conn.is_autocommit()
        )
    }

    pub async fn execute_many(
        &mut self,
        id: u32,
        statement: String,
        params: Vec<Params>,
        begin: Option<String>,
    ) -> Result<Outcome, DbError> {
        if self.is_postgres(id)? {
            let (conn, _) = self.postgres(id)?;
            return conn
                .execute_many(&statement, &params, begin.as_deref())
                .await;
        }
        self.on(id, move |conn, _| {
            conn.execute_many(&statement, &params, begin.as_deref())
        })
        .await
    }

    pub async fn execute_script(&mut self, id: u32, script: String) -> Result<Outcome, DbError> {
        if self.is_postgres(id)? {
            let (conn, _) = self.postgres(id)?;
            return conn.execute_script(&script).await;
        }
        self.on(id, move |conn, _| conn.execute_script(&script))
            .await
    }

    pub async fn commit(&mut self, id: u32) -> Result<(), DbError> {
        if self.is_postgres(id)? {
            let (conn, _) = self.postgres(id)?;
            return conn.commit().await;
        }
        if self.sqlite_idle(id) {
            return Ok(());
        }
        self.on(id, |conn, _| conn.commit()).await
    }

    pub async fn rollback(&mut self, id: u32) -> Result<(), DbError> {
        if self.is_postgres(id)? {
            let (conn, _) = self.postgres(id)?;
            return conn.rollback().await;
        }
        if self.sqlite_idle(id) {
            return Ok(());
        }
        self.on(id, |conn, _| conn.rollback()).await
    }

    /// Roll back and close connection `id` (nothing if it is closed already).
    pub fn close(&mut self, id: u32) {
        self.memory_held.retain(|(other, _)| *other != id);
        if let Some(slot) = self.connections.get_mut(id as usize)
            && let Some(conn) = slot.take()
        {
            release(vec![conn]);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let open: Vec<_> = self.connections.drain(..).flatten().collect();
        if !open.is_empty() {
            release(open);
        }
    }
}

/// Roll back and return connections to their pool: SQLite's on a database thread (a rollback
/// touches the disk); Postgres's reset themselves on a task.
fn release(connections: Vec<Connection>) {
    let mut sqlite = Vec::new();
    for conn in connections {
        match conn {
            Connection::Sqlite(conn) => sqlite.push(conn),
            Connection::Postgres(conn) => drop(conn),
        }
    }
    if sqlite.is_empty() {
        return;
    }
    threads::spawn(move || drop(sqlite));
}

/// What a request may still receive.
pub struct Allowance {
    pub rows: usize,
    pub bytes: usize,
}

fn thread_failed(e: threads::ThreadError) -> DbError {
    DbError::Unavailable(e.to_string())
}

fn closed() -> DbError {
    DbError::Programming("Cannot operate on a closed database.".into())
}
