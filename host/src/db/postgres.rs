//! Running route code's SQL in Postgres, so that several `filerouter run` processes share one
//! database: the operator's server, a pool of connections per [`Pool`], and one statement at a
//! time under the request's deadline and bounds.
//!
//! The operator names the database with a URL (`postgres://user:password@host:port/db`), with
//! libpq's `sslmode` and `sslrootcert` for TLS ([`tls`]), and sizes the pool ([`PoolSettings`]).
//! A wrong URL, an unreachable server or a refused certificate is an error at start that names
//! `host:port/db` and the reason, never the password.
//!
//! Route code keeps the `sqlite3` API. What changes on the way:
//! - Placeholders (`?`, `:name`, `@name`, `$name`) become `$1..$n` ([`super::pg_text`]); every
//!   value is sent as text and Postgres infers its type from where it is used (an ambiguous
//!   spot, like `SELECT ? + ?`, needs a cast: `?::int`).
//! - Results come back as SQLite's storage classes: booleans and integers as integers,
//!   `real`/`double precision` as reals, `numeric` as its exact decimal text, text-like types,
//!   JSON, UUIDs and enums as text, dates and times as ISO 8601 text, `bytea` as blobs, `void`
//!   as `None`. Other types are an error that says to cast the column (`col::text`).
//! - `lastrowid` is always `None` (Postgres has no rowid): use `INSERT ... RETURNING id`.
//! - The transaction state is tracked here from each statement's first words (tokio-postgres
//!   does not report it). Inside a transaction every statement runs under a savepoint of the
//!   host's, so a failed statement leaves the transaction usable as in SQLite (Postgres would
//!   abort all of it); `executemany` is one statement for this. `executescript` runs the
//!   script in one simple query: without its own `BEGIN`, a failure rolls the whole script
//!   back (SQLite keeps the statements before the failing one), and `changes` is -1.
//!   SQLite's `BEGIN DEFERRED/IMMEDIATE/EXCLUSIVE` are plain `BEGIN` here.
//! - Route code's statements (and the project's migrations) run on connections that log in as
//!   a role of their own, which has no rights on the host's tables ([`roles`]): that, not the
//!   text of the SQL, keeps them out. The host's own statements run as the URL's role. A
//!   statement that names a `_filerouter_` table is still refused before it is sent, with a
//!   friendlier message than Postgres's, and so is `COPY` (the protocol here has no room for
//!   it). Everything else is up to the database: the server refuses what the role may not do.
//!
//! A connection is checked out for one request with `statement_timeout` set to the request's
//! remaining time, so a long statement is stopped by Postgres; a statement that still runs at
//! the deadline is cancelled from here and its connection closed. When the request ends, a
//! connection goes back to the pool after `ROLLBACK` (when a transaction is open) and
//! `DISCARD ALL`, on a task of its own.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::BytesMut;
use futures_util::{TryStreamExt, future::join, pin_mut};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::{
    Client,
    error::ErrorPosition,
    types::{Format, FromSql, IsNull, Kind, ToSql, Type, to_sql_checked},
};

use super::{Allowance, DbError, Outcome, Params, Value, pg_text};

/// How one process's pool of route code's connections to a database is sized, and how long
/// it waits: operator settings (`run --db-pool-size`, `--db-connect-timeout`,
/// `--db-checkout-timeout`; `db_pool_size`, `db_connect_timeout_s`, `db_checkout_timeout_s` in
/// tenants.toml). The reasons for the defaults are in docs/guides/postgres-tls.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Connections route code's requests may have open at once in this process (in use and
    /// idle); half of them are kept idle between requests.
    pub size: usize,
    /// How long opening a connection (TCP, TLS, login) may take.
    pub connect_timeout: Duration,
    /// How long a request waits for a free connection when all `size` are in use (at most
    /// until the request's own time limit).
    pub checkout_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            size: 32,
            connect_timeout: Duration::from_secs(10),
            checkout_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a pool setting is refused: the message names the bounds, the caller names the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolSettingError {
    #[error("must be from 1 to {max}, not {given}")]
    Size { given: String, max: usize },
    #[error("must be a number of seconds above 0 and at most {max}, not {given}")]
    Timeout { given: String, max: u64 },
}

impl PoolSettings {
    /// The largest pool: Postgres's own `max_connections` is rarely above a few thousand.
    pub const MAX_SIZE: usize = 10_000;
    /// The longest timeout, in seconds.
    pub const MAX_TIMEOUT_S: u64 = 3600;

    /// A pool size as given (a flag's text, a file's number).
    pub fn size(given: &str) -> Result<usize, PoolSettingError> {
        match given.trim().parse::<usize>() {
            Ok(n) if (1..=Self::MAX_SIZE).contains(&n) => Ok(n),
            _ => Err(PoolSettingError::Size {
                given: given.to_string(),
                max: Self::MAX_SIZE,
            }),
        }
    }

    /// A timeout in seconds as given (`10`, `2.5`).
    pub fn timeout(given: &str) -> Result<Duration, PoolSettingError> {
        match given.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s <= Self::MAX_TIMEOUT_S as f64 => Ok(Duration::from_secs_f64(s)),
            _ => Err(PoolSettingError::Timeout {
                given: given.to_string(),
                max: Self::MAX_TIMEOUT_S,
            }),
        }
    }

    /// Idle connections kept between requests.
    fn max_idle(&self) -> usize {
        (self.size / 2).max(1)
    }
}

/// How long the host's own work (migrations, status) waits for a free connection.
const HOST_WAIT: Duration = Duration::from_secs(60);

/// Connections as the URL's role (the owner) one process keeps open at most, and idle.
const HOST_MAX_OPEN: usize = 4;
const HOST_MAX_IDLE: usize = 1;

/// How long resetting a connection for the pool may take before it is closed instead.
const RESET_WAIT: Duration = Duration::from_secs(5);

/// The savepoint each statement inside a transaction runs under.
const SAVEPOINT: &str = "_filerouter_statement";

pub mod roles;
pub mod tls;

/// One Postgres database: how to reach it, and idle connections as each of its two roles.
#[derive(Clone)]
pub struct Pool {
    /// Route code's role: requests and migrations.
    inner: Arc<PoolInner>,
    /// The URL's role: the host's own statements.
    owner: Arc<PoolInner>,
}

struct PoolInner {
    config: tokio_postgres::Config,
    /// `host:port/db`, for messages (never the password).
    target: String,
    idle: Mutex<Vec<Client>>,
    /// One permit per open connection.
    permits: Arc<Semaphore>,
    max_open: usize,
    max_idle: usize,
    /// Run on every checkout, before the statement timeout is set.
    session: &'static str,
    /// For route code's pool: how to put its role back when a login as it fails.
    repair: Option<(Arc<PoolInner>, roles::RouteRole)>,
    /// TLS as the URL asks for it.
    tls: tls::TlsOptions,
    connector: tokio_postgres_rustls::MakeRustlsConnect,
    /// How long opening a connection, and a request's wait for one, may take.
    connect_timeout: Duration,
    checkout_timeout: Duration,
}

/// Whether `url` is a Postgres URL (or key-value connection string) tokio-postgres can use;
/// the message names what is wrong, never the password.
/// The TLS options are checked too (a CA file is read).
pub fn check_url(url: &str) -> Result<(), String> {
    let (_, options) = parse(url).map_err(|e| e.to_string())?;
    options.connector().map(|_| ()).map_err(|e| e.to_string())
}

fn parse(url: &str) -> Result<(tokio_postgres::Config, tls::TlsOptions), DbError> {
    let invalid = |e: String| DbError::Unavailable(format!("the database URL is not valid: {e}"));
    let (rest, options) = tls::split(url).map_err(|e| invalid(e.to_string()))?;
    let mut config = rest
        .parse::<tokio_postgres::Config>()
        .map_err(|e| invalid(chain(&e)))?;
    config.ssl_mode(options.wire_mode());
    Ok((config, options))
}

/// `host:port/db` of a configuration.
fn target(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = config
                .get_ports()
                .get(i)
                .or(config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                tokio_postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_string()
    } else {
        hosts.join(",")
    };
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{hosts}/{db}")
}

impl Pool {
    /// The database at `url`, connected to once now as each role, its roles and the host's
    /// schema prepared ([`roles::prepare`]): a wrong URL, an unreachable server, a refused
    /// login or a role that cannot do what it must is an error at start.
    pub async fn connect(url: &str, settings: PoolSettings) -> Result<Pool, DbError> {
        let (mut config, options) = parse(url)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(settings.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("filerouter");
        }
        let target = target(&config);
        let connector = options.connector().map_err(|e| {
            DbError::Unavailable(format!("cannot connect to the database at {target}: {e}"))
        })?;
        let (role, route_config) = roles::RouteRole::of(&config).map_err(|e| unavailable(&e))?;
        let owner = Arc::new(PoolInner {
            target: target.clone(),
            config,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(HOST_MAX_OPEN)),
            max_open: HOST_MAX_OPEN,
            max_idle: HOST_MAX_IDLE,
            // Nothing route code made is looked up by the host's statements.
            session: "SET search_path = pg_catalog;",
            repair: None,
            tls: options.clone(),
            connector: connector.clone(),
            connect_timeout: settings.connect_timeout,
            checkout_timeout: HOST_WAIT,
        });
        let first = owner
            .connect(Instant::now() + settings.connect_timeout)
            .await?;
        roles::prepare(&first, &role)
            .await
            .map_err(|e| unavailable(&e))?;
        owner.idle().push(first);
        let inner = Arc::new(PoolInner {
            target,
            config: route_config,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(settings.size)),
            max_open: settings.size,
            max_idle: settings.max_idle(),
            session: "",
            repair: Some((owner.clone(), role)),
            tls: options,
            connector,
            connect_timeout: settings.connect_timeout,
            checkout_timeout: settings.checkout_timeout,
        });
        let first = inner
            .connect(Instant::now() + settings.connect_timeout)
            .await?;
        inner.idle().push(first);
        Ok(Pool { inner, owner })
    }

    /// `host:port/db`.
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// A connection for route code, until `deadline`, as route code's role: its statements
    /// are guarded and stopped at the deadline.
    pub async fn checkout(&self, deadline: Instant) -> Result<Connection, DbError> {
        self.inner.clone().checkout(Some(deadline)).await
    }

    /// A connection for the project's migrations: route code's role (they are the project's
    /// code), no statement timeout.
    pub async fn migrator(&self) -> Result<Connection, DbError> {
        self.inner.clone().checkout(None).await
    }

    /// A connection for the host's own work (the migrations' record), as the URL's role: no
    /// guard, no statement timeout, `search_path` only `pg_catalog`. Never for project SQL.
    pub async fn host(&self) -> Result<Connection, DbError> {
        self.owner.clone().checkout(None).await
    }
}

fn unavailable(e: &roles::RoleError) -> DbError {
    DbError::Unavailable(e.to_string())
}

impl PoolInner {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Client>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection; for route code's role, after putting the role back once if a login
    /// as it fails ([`roles::repair`]).
    async fn connect(&self, until: Instant) -> Result<Client, DbError> {
        match self.connect_once(until).await {
            Err(Refused::Login(e)) if self.repair.is_some() => {
                let Some((owner, role)) = &self.repair else {
                    return Err(self.refused(&e));
                };
                let client = owner.connect_once(until).await.map_err(|e| match e {
                    Refused::Login(e) => owner.refused(&e),
                    Refused::Other(e) => e,
                })?;
                roles::repair(&client, role)
                    .await
                    .map_err(|e| unavailable(&e))?;
                drop(client);
                self.connect_once(until).await.map_err(|e| match e {
                    Refused::Login(e) => self.refused(&e),
                    Refused::Other(e) => e,
                })
            }
            Err(Refused::Login(e)) => Err(self.refused(&e)),
            Err(Refused::Other(e)) => Err(e),
            Ok(client) => Ok(client),
        }
    }

    fn refused(&self, e: &tokio_postgres::Error) -> DbError {
        DbError::Unavailable(format!(
            "cannot connect to the database at {} as {}: {}",
            self.target,
            self.config.get_user().unwrap_or("?"),
            self.tls.explain(&chain(e))
        ))
    }

    async fn connect_once(&self, until: Instant) -> Result<Client, Refused> {
        let until = until.min(Instant::now() + self.connect_timeout);
        let connecting = self.config.connect(self.connector.clone());
        let (client, connection) = match tokio::time::timeout_at(until.into(), connecting).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) if is_login_refused(&e) => return Err(Refused::Login(e)),
            Ok(Err(e)) => {
                return Err(Refused::Other(DbError::Unavailable(format!(
                    "cannot connect to the database at {}: {}",
                    self.target,
                    self.tls.explain(&chain(&e))
                ))));
            }
            Err(_) => {
                return Err(Refused::Other(DbError::Unavailable(format!(
                    "cannot connect to the database at {}: no answer in time",
                    self.target
                ))));
            }
        };
        let target = self.target.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("the connection to the database at {target} ended: {e}");
            }
        });
        Ok(client)
    }

    async fn checkout(self: Arc<Self>, deadline: Option<Instant>) -> Result<Connection, DbError> {
        let until = deadline.unwrap_or_else(|| Instant::now() + HOST_WAIT);
        let wait_until = until.min(Instant::now() + self.checkout_timeout);
        let permit = match tokio::time::timeout_at(
            wait_until.into(),
            self.permits.clone().acquire_owned(),
        )
        .await
        {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(DbError::Unavailable("the pool is closed".into())),
            Err(_) if wait_until < until => {
                return Err(DbError::Limit(format!(
                    "all {} connections to the database at {} were in use for {:.1}s (the pool's size and checkout timeout: run --db-pool-size and --db-checkout-timeout, or db_pool_size and db_checkout_timeout_s in tenants.toml)",
                    self.max_open,
                    self.target,
                    self.checkout_timeout.as_secs_f64()
                )));
            }
            Err(_) => {
                return Err(DbError::Limit(format!(
                    "all {} connections to the database were in use until this request's time limit",
                    self.max_open
                )));
            }
        };
        // An idle connection may have died (the server restarted): then one fresh one.
        let mut fresh = false;
        loop {
            let pooled = if fresh {
                None
            } else {
                loop {
                    let Some(client) = self.idle().pop() else {
                        break None;
                    };
                    if !client.is_closed() {
                        break Some(client);
                    }
                }
            };
            let reused = pooled.is_some();
            let client = match pooled {
                Some(client) => client,
                None => self.connect(until).await?,
            };
            let timeout_ms = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(time_limit());
                    }
                    left.as_millis().max(1)
                }
                None => 0,
            };
            let set = format!("{}SET statement_timeout = {timeout_ms}", self.session);
            match tokio::time::timeout_at(until.into(), client.batch_execute(&set)).await {
                Ok(Ok(())) => {
                    return Ok(Connection {
                        client: Some(client),
                        pool: self.clone(),
                        permit: Some(permit),
                        deadline,
                        in_transaction: false,
                        savepoint: false,
                        busy: false,
                        broken: None,
                    });
                }
                Ok(Err(_)) if reused => fresh = true,
                Ok(Err(e)) => return Err(error(&e)),
                Err(_) => {
                    return Err(DbError::Limit(format!(
                        "the database at {} did not answer before the request's time limit",
                        self.target
                    )));
                }
            }
        }
    }

    /// Reset a connection a request is done with and keep it, or close it.
    async fn put_back(&self, client: Client, busy: bool, in_transaction: bool) {
        if busy {
            // A statement may still be running: stop it, and close the connection.
            let cancel = client.cancel_token();
            drop(client);
            let _ =
                tokio::time::timeout(RESET_WAIT, cancel.cancel_query(self.connector.clone())).await;
            return;
        }
        if client.is_closed() {
            return;
        }
        let reset = async {
            if in_transaction {
                client.batch_execute("ROLLBACK").await?;
            }
            client.batch_execute("DISCARD ALL").await
        };
        if let Ok(Ok(())) = tokio::time::timeout(RESET_WAIT, reset).await {
            let mut idle = self.idle();
            if idle.len() < self.max_idle {
                idle.push(client);
            }
        }
    }
}

/// Why a login failed: the role's password or settings (which [`roles::repair`] puts back),
/// or anything else.
enum Refused {
    Login(tokio_postgres::Error),
    Other(DbError),
}

/// Whether the server refused the login itself: a wrong password, or a setting of the role's
/// that fails at login (`ALTER ROLE … SET role = …`), or a role that may not log in.
fn is_login_refused(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code().is_some_and(|c| {
        *c == SqlState::INVALID_PASSWORD
            || *c == SqlState::INSUFFICIENT_PRIVILEGE
            || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    })
}

fn time_limit() -> DbError {
    DbError::Limit(
        "the statement ran past the request's time limit (sandbox.wall_s) and was stopped".into(),
    )
}

fn closed() -> DbError {
    DbError::Programming("Cannot operate on a closed database.".into())
}

/// A connection checked out for one request (or for the host).
pub struct Connection {
    client: Option<Client>,
    pool: Arc<PoolInner>,
    /// Returned when the connection is back in the pool (or closed).
    permit: Option<OwnedSemaphorePermit>,
    /// `None`: the host's own connection (no guard, no deadline).
    deadline: Option<Instant>,
    in_transaction: bool,
    /// The savepoint of the last statement is still open (released before the next one).
    savepoint: bool,
    /// Something was sent whose answer has not all arrived: the connection is not reused.
    busy: bool,
    /// Why the connection cannot be used any more (it was interrupted).
    broken: Option<String>,
}

/// What runs before a statement, and what it changes.
#[derive(Default)]
struct Prelude {
    sql: String,
    releases: bool,
    begins: bool,
    savepoint: bool,
}

/// Statements that open, end or mark transactions: never run under the host's savepoint.
fn controls_transaction(words: &[String]) -> bool {
    match words.first().map(String::as_str) {
        Some("BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT" | "SAVEPOINT")
        | Some("RELEASE") => true,
        Some("PREPARE") => words.get(1).is_some_and(|w| w == "TRANSACTION"),
        _ => false,
    }
}

/// Whether a transaction is open after `sql` (whose first words are `words`) succeeded, when
/// one was (`open`) before.
fn transaction_after(sql: &str, words: &[String], open: bool) -> bool {
    let second = words.get(1).map(String::as_str);
    match words.first().map(String::as_str) {
        Some("BEGIN" | "START") => true,
        Some("COMMIT" | "END") if second == Some("PREPARED") => open,
        Some("COMMIT" | "END") => pg_text::chains(sql),
        Some("ROLLBACK" | "ABORT") if matches!(second, Some("TO" | "PREPARED")) => open,
        Some("ROLLBACK" | "ABORT") => pg_text::chains(sql),
        Some("PREPARE") if second == Some("TRANSACTION") => false,
        _ => open,
    }
}

/// Statements that change rows (DB-API's `rowcount` counts them).
fn changes_rows(words: &[String]) -> bool {
    matches!(
        words.first().map(String::as_str),
        Some("INSERT" | "UPDATE" | "DELETE" | "MERGE")
    )
}

impl Connection {
    fn client(&self) -> Result<&Client, DbError> {
        if let Some(reason) = &self.broken {
            return Err(DbError::Unavailable(reason.clone()));
        }
        self.client.as_ref().ok_or_else(closed)
    }

    /// What route code may not run here.
    fn check(&self, sql: &str) -> Result<(), DbError> {
        if self.deadline.is_none() {
            return Ok(());
        }
        check_untrusted(sql)
    }

    /// Before talking to the server for route code: the connection must be usable and the
    /// request still have time. The connection is busy until [`Self::finish`].
    fn start(&mut self) -> Result<(), DbError> {
        self.client()?;
        if let Some(deadline) = self.deadline
            && Instant::now() >= deadline
        {
            return Err(time_limit());
        }
        self.busy = true;
        Ok(())
    }

    /// Run `work` (which talks to the server) until the request's deadline.
    async fn until_deadline<T>(
        deadline: Option<Instant>,
        work: impl Future<Output = Result<T, DbError>>,
    ) -> Option<Result<T, DbError>> {
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), work).await.ok(),
            None => Some(work.await),
        }
    }

    /// After [`Self::until_deadline`]: its result, or (past the deadline) the statement
    /// cancelled and the connection not used again.
    fn finish<T>(&mut self, result: Option<Result<T, DbError>>) -> Result<T, DbError> {
        match result {
            Some(result) => {
                self.busy = false;
                result
            }
            None => {
                if let Some(client) = &self.client {
                    let cancel = client.cancel_token();
                    let connector = self.pool.connector.clone();
                    tokio::spawn(async move {
                        let _ =
                            tokio::time::timeout(RESET_WAIT, cancel.cancel_query(connector)).await;
                    });
                }
                self.broken =
                    Some("the connection was interrupted at the request's time limit".into());
                Err(time_limit())
            }
        }
    }

    /// The outcome of a statement that returned nothing.
    fn idle_outcome(&self) -> Outcome {
        Outcome {
            changes: -1,
            in_transaction: self.in_transaction,
            ..Outcome::default()
        }
    }

    /// What runs (as one simple query) before a statement: our last savepoint released, the
    /// `begin` statement when no transaction is open, and a new savepoint inside one.
    fn prelude(&self, begin: Option<&str>, control: bool) -> Result<Prelude, DbError> {
        let mut prelude = Prelude::default();
        if self.savepoint {
            prelude
                .sql
                .push_str(&format!("RELEASE SAVEPOINT {SAVEPOINT};"));
            prelude.releases = true;
        }
        if let Some(begin) = begin {
            super::guard::check_begin(begin)?;
            if !self.in_transaction {
                // Postgres has no DEFERRED/IMMEDIATE/EXCLUSIVE: its writers lock rows.
                prelude.sql.push_str("BEGIN;");
                prelude.begins = true;
            }
        }
        if (self.in_transaction || prelude.begins) && !control {
            prelude.sql.push_str(&format!("SAVEPOINT {SAVEPOINT};"));
            prelude.savepoint = true;
        }
        Ok(prelude)
    }

    /// After a statement failed: back to its savepoint, so the transaction goes on.
    async fn recover(&mut self, words: &[String]) {
        if self.savepoint {
            self.savepoint = false;
            if let Some(client) = &self.client {
                let back =
                    format!("ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}");
                let _ = client.batch_execute(&back).await;
            }
        }
        // A failed COMMIT ends the transaction all the same.
        if matches!(words.first().map(String::as_str), Some("COMMIT" | "END")) {
            self.in_transaction = false;
        }
    }

    /// Prepare `sql` after running `prelude` (pipelined: one round trip).
    async fn prepare(
        &mut self,
        prelude: &Prelude,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, DbError> {
        let client = self.client()?;
        if prelude.sql.is_empty() {
            return client.prepare(sql).await.map_err(|e| error(&e));
        }
        let (ran, prepared) = join(client.batch_execute(&prelude.sql), client.prepare(sql)).await;
        ran.map_err(|e| error(&e))?;
        if prelude.releases {
            self.savepoint = false;
        }
        if prelude.begins {
            self.in_transaction = true;
        }
        if prelude.savepoint {
            self.savepoint = true;
        }
        prepared.map_err(|e| error(&e))
    }

    /// Run one statement with `params`, after `begin` if no transaction is open.
    pub async fn execute(
        &mut self,
        sql: &str,
        params: &Params,
        begin: Option<&str>,
        allowance: &mut Allowance,
    ) -> Result<Outcome, DbError> {
        let statements = pg_text::statements(sql);
        if statements.len() > 1 {
            return Err(DbError::Programming(
                "You can only execute one statement at a time.".into(),
            ));
        }
        self.check(sql)?;
        let rewritten = pg_text::rewrite(sql, params)?;
        if statements.is_empty() {
            self.client()?;
            return Ok(self.idle_outcome());
        }
        let words = pg_text::keywords(sql, 3);
        // SQLite's BEGIN forms, written by route code itself.
        let text = match words.first().map(String::as_str) {
            Some("BEGIN")
                if super::guard::check_begin(sql.trim().trim_end_matches(';')).is_ok() =>
            {
                "BEGIN".to_string()
            }
            _ => rewritten.sql,
        };
        let prelude = self.prelude(begin, controls_transaction(&words))?;
        self.start()?;
        let deadline = self.deadline;
        let ran = Self::until_deadline(deadline, async {
            match self
                .run_one(&prelude, &text, &rewritten.values, allowance)
                .await
            {
                Ok(done) => Ok(done),
                Err(e) => {
                    self.recover(&words).await;
                    Err(e)
                }
            }
        })
        .await;
        let (columns, rows, affected) = self.finish(ran)?;
        self.in_transaction = transaction_after(sql, &words, self.in_transaction);
        if !self.in_transaction {
            self.savepoint = false;
        }
        Ok(Outcome {
            columns,
            rows,
            changes: if changes_rows(&words) {
                affected.map_or(-1, |n| n as i64)
            } else {
                -1
            },
            last_row_id: None,
            in_transaction: self.in_transaction,
        })
    }

    async fn run_one(
        &mut self,
        prelude: &Prelude,
        sql: &str,
        values: &[Value],
        allowance: &mut Allowance,
    ) -> Result<(Vec<String>, Vec<Vec<Value>>, Option<u64>), DbError> {
        let statement = self.prepare(prelude, sql).await?;
        check_count(&statement, values)?;
        let client = self.client()?;
        let columns: Vec<String> = statement
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        let types: Vec<Type> = statement
            .columns()
            .iter()
            .map(|c| c.type_().clone())
            .collect();
        let stream = client
            .query_raw(&statement, values.iter().map(TextParam))
            .await
            .map_err(|e| error(&e))?;
        pin_mut!(stream);
        let mut rows = Vec::new();
        while let Some(row) = stream.try_next().await.map_err(|e| error(&e))? {
            if allowance.rows == 0 {
                return Err(DbError::Limit(
                    "this request's statements returned more rows than a request may receive (database.max_rows): page through them with LIMIT and OFFSET".into(),
                ));
            }
            allowance.rows -= 1;
            let mut out = Vec::with_capacity(columns.len());
            for (index, (name, ty)) in columns.iter().zip(&types).enumerate() {
                let raw: Raw<'_> = row.try_get(index).map_err(|e| error(&e))?;
                let value = match raw.0 {
                    None => Value::Null,
                    Some(bytes) => decode(ty, bytes, name)?,
                };
                let cost = value.cost();
                if cost > allowance.bytes {
                    return Err(DbError::Limit(
                        "this request's statements returned more bytes than a request may receive (database.max_result_mb): select fewer columns or rows".into(),
                    ));
                }
                allowance.bytes -= cost;
                out.push(value);
            }
            rows.push(out);
        }
        Ok((columns, rows, stream.rows_affected()))
    }

    /// Run one data-changing statement once per parameter set.
    pub async fn execute_many(
        &mut self,
        sql: &str,
        params: &[Params],
        begin: Option<&str>,
    ) -> Result<Outcome, DbError> {
        if pg_text::statements(sql).len() > 1 {
            return Err(DbError::Programming(
                "You can only execute one statement at a time.".into(),
            ));
        }
        self.check(sql)?;
        let words = pg_text::keywords(sql, 3);
        if !changes_rows(&words) {
            return Err(DbError::Programming(
                "executemany() can only execute DML statements.".into(),
            ));
        }
        let sets = params
            .iter()
            .map(|set| pg_text::rewrite(sql, set))
            .collect::<Result<Vec<_>, _>>()?;
        let prelude = self.prelude(begin, false)?;
        self.start()?;
        let deadline = self.deadline;
        let ran = Self::until_deadline(deadline, async {
            match self.run_many(&prelude, &sets).await {
                Ok(changes) => Ok(changes),
                Err(e) => {
                    self.recover(&words).await;
                    Err(e)
                }
            }
        })
        .await;
        let changes = self.finish(ran)?;
        Ok(Outcome {
            changes,
            in_transaction: self.in_transaction,
            ..Outcome::default()
        })
    }

    async fn run_many(
        &mut self,
        prelude: &Prelude,
        sets: &[pg_text::Rewritten],
    ) -> Result<i64, DbError> {
        let Some(first) = sets.first() else {
            // No parameter sets: nothing to run but the prelude (a BEGIN, as in SQLite).
            if !prelude.sql.is_empty() {
                let client = self.client()?;
                client
                    .batch_execute(&prelude.sql)
                    .await
                    .map_err(|e| error(&e))?;
                self.in_transaction |= prelude.begins;
                self.savepoint = prelude.savepoint;
            }
            return Ok(0);
        };
        let statement = self.prepare(prelude, &first.sql).await?;
        let client = self.client()?;
        let mut changes = 0i64;
        for set in sets {
            check_count(&statement, &set.values)?;
            let stream = client
                .query_raw(&statement, set.values.iter().map(TextParam))
                .await
                .map_err(|e| error(&e))?;
            pin_mut!(stream);
            // A RETURNING clause's rows are not kept (as DB-API's executemany).
            while stream.try_next().await.map_err(|e| error(&e))?.is_some() {}
            changes += stream.rows_affected().unwrap_or(0) as i64;
        }
        Ok(changes)
    }

    /// Commit what is pending, then run every statement of `script` (one simple query).
    pub async fn execute_script(&mut self, script: &str) -> Result<Outcome, DbError> {
        let statements = pg_text::statements(script);
        if self.deadline.is_some() {
            for statement in &statements {
                check_untrusted(statement.text)?;
            }
        }
        self.commit().await?;
        if statements.is_empty() {
            self.client()?;
            return Ok(self.idle_outcome());
        }
        self.start()?;
        let deadline = self.deadline;
        let client = self.client()?;
        let ran = Self::until_deadline(deadline, async {
            match client.batch_execute(script).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    // Where it stopped is not known: end whatever it left open.
                    let _ = client.batch_execute("ROLLBACK").await;
                    Err(error(&e))
                }
            }
        })
        .await;
        let outcome = self.finish(ran);
        self.savepoint = false;
        self.in_transaction = outcome.is_ok()
            && statements.iter().fold(false, |open, statement| {
                transaction_after(statement.text, &pg_text::keywords(statement.text, 3), open)
            });
        outcome.map(|()| self.idle_outcome())
    }

    pub async fn commit(&mut self) -> Result<(), DbError> {
        self.end("COMMIT").await
    }

    pub async fn rollback(&mut self) -> Result<(), DbError> {
        self.end("ROLLBACK").await
    }

    async fn end(&mut self, verb: &'static str) -> Result<(), DbError> {
        self.client()?;
        if !self.in_transaction {
            return Ok(());
        }
        self.start()?;
        let deadline = self.deadline;
        let client = self.client()?;
        let ran = Self::until_deadline(deadline, async {
            client.batch_execute(verb).await.map_err(|e| error(&e))
        })
        .await;
        // Even a failed COMMIT ends the transaction.
        self.in_transaction = false;
        self.savepoint = false;
        self.finish(ran)
    }

    /// Run `sql` (several statements, no parameters) as the host; the server's error as it
    /// is, for its position.
    pub async fn host_script(&mut self, sql: &str) -> Result<(), tokio_postgres::Error> {
        let Some(client) = &self.client else {
            return Ok(());
        };
        self.busy = true;
        let result = client.batch_execute(sql).await;
        self.busy = false;
        let words = pg_text::keywords(sql, 3);
        if result.is_ok() {
            self.in_transaction = transaction_after(sql, &words, self.in_transaction);
        }
        result
    }

    /// Run one statement as the host with text parameters; every value of every row as text
    /// (`NULL` as `None`).
    pub async fn host_query(
        &mut self,
        sql: &str,
        params: &[&str],
    ) -> Result<Vec<Vec<Option<String>>>, DbError> {
        self.client()?;
        self.busy = true;
        let client = self.client()?;
        let values: Vec<Value> = params.iter().map(|p| Value::Text(p.to_string())).collect();
        let rows = async {
            let statement = client.prepare(sql).await?;
            let stream = client
                .query_raw(&statement, values.iter().map(TextParam))
                .await?;
            stream.try_collect::<Vec<_>>().await
        }
        .await;
        self.busy = false;
        let rows = rows.map_err(|e| error(&e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(row.len());
            for (index, column) in row.columns().iter().enumerate() {
                let raw: Raw<'_> = row.try_get(index).map_err(|e| error(&e))?;
                values.push(match raw.0 {
                    None => None,
                    Some(bytes) => match decode(column.type_(), bytes, column.name())? {
                        Value::Text(text) => Some(text),
                        Value::Integer(i) => Some(i.to_string()),
                        Value::Real(f) => Some(f.to_string()),
                        Value::Null => None,
                        Value::Blob(b) => Some(hex::encode(b)),
                    },
                });
            }
            out.push(values);
        }
        Ok(out)
    }
}

impl Drop for Connection {
    /// Roll back, reset and return the connection to its pool, on a task of its own.
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let permit = self.permit.take();
        let pool = self.pool.clone();
        let busy = self.busy || self.broken.is_some();
        let in_transaction = self.in_transaction || self.savepoint;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                pool.put_back(client, busy, in_transaction).await;
                drop(permit);
            });
        }
        // Without a runtime the client is dropped, which closes the connection.
    }
}

/// Refuse what route code may not run on Postgres: the host's tables by name (a friendly
/// message only: the route role's lack of rights is the boundary), and `COPY`.
pub fn check_untrusted(sql: &str) -> Result<(), DbError> {
    if let Some(table) = pg_text::names_host_table(sql) {
        return Err(DbError::Refused(format!(
            "the table {table} belongs to filerouter (it keeps the migrations' record): route code cannot use it"
        )));
    }
    for statement in pg_text::statements(sql) {
        if pg_text::keywords(statement.text, 1)
            .first()
            .map(String::as_str)
            == Some("COPY")
        {
            return Err(DbError::Refused(
                "COPY is not supported in the sandbox: use INSERT and SELECT".into(),
            ));
        }
    }
    Ok(())
}

fn check_count(statement: &tokio_postgres::Statement, values: &[Value]) -> Result<(), DbError> {
    if statement.params().len() != values.len() {
        return Err(DbError::Programming(format!(
            "Incorrect number of bindings supplied. The current statement uses {}, and there are {} supplied.",
            statement.params().len(),
            values.len()
        )));
    }
    Ok(())
}

/// A parameter, sent as text whatever type Postgres inferred for its place.
#[derive(Debug)]
struct TextParam<'a>(&'a Value);

impl ToSql for TextParam<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Value::Null => return Ok(IsNull::Yes),
            Value::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
            Value::Real(f) => out.extend_from_slice(real_text(*f).as_bytes()),
            Value::Text(text) => out.extend_from_slice(text.as_bytes()),
            Value::Blob(blob) => {
                out.extend_from_slice(b"\\x");
                out.extend_from_slice(hex::encode(blob).as_bytes());
            }
        }
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

/// A float as Postgres reads it (`NaN`, `Infinity`, `-Infinity`, else the shortest exact
/// decimal).
fn real_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f == f64::INFINITY {
        "Infinity".into()
    } else if f == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        format!("{f:?}")
    }
}

/// A column's value in Postgres's binary format, whatever its type.
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(
        _ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }

    fn from_sql_null(_ty: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }
}

/// A value of `ty` in binary format as one of SQLite's storage classes.
fn decode(ty: &Type, raw: &[u8], column: &str) -> Result<Value, DbError> {
    let malformed = || {
        DbError::Operational(format!(
            "column '{column}': the server sent a malformed {} value",
            ty.name()
        ))
    };
    let text = |bytes: &[u8]| {
        String::from_utf8(bytes.to_vec())
            .map(Value::Text)
            .map_err(|_| malformed())
    };
    fn fixed<const N: usize>(raw: &[u8]) -> Option<[u8; N]> {
        raw.try_into().ok()
    }
    if let Kind::Domain(base) = ty.kind() {
        return decode(base, raw, column);
    }
    if let Kind::Enum(_) = ty.kind() {
        return text(raw);
    }
    Ok(match *ty {
        Type::BOOL => Value::Integer(i64::from(raw.first().ok_or_else(malformed)? != &0)),
        Type::INT2 => Value::Integer(i16::from_be_bytes(fixed(raw).ok_or_else(malformed)?).into()),
        Type::INT4 => Value::Integer(i32::from_be_bytes(fixed(raw).ok_or_else(malformed)?).into()),
        Type::INT8 => Value::Integer(i64::from_be_bytes(fixed(raw).ok_or_else(malformed)?)),
        Type::OID => Value::Integer(u32::from_be_bytes(fixed(raw).ok_or_else(malformed)?).into()),
        Type::FLOAT4 => Value::Real(f32::from_be_bytes(fixed(raw).ok_or_else(malformed)?).into()),
        Type::FLOAT8 => Value::Real(f64::from_be_bytes(fixed(raw).ok_or_else(malformed)?)),
        Type::NUMERIC => Value::Text(numeric_text(raw).ok_or_else(malformed)?),
        Type::TEXT
        | Type::VARCHAR
        | Type::BPCHAR
        | Type::NAME
        | Type::UNKNOWN
        | Type::JSON
        | Type::XML
        | Type::CHAR => text(raw)?,
        // jsonb: a version byte (1), then the text.
        Type::JSONB => match raw.split_first() {
            Some((1, rest)) => text(rest)?,
            _ => return Err(malformed()),
        },
        Type::BYTEA => Value::Blob(raw.to_vec()),
        // What a function that returns nothing (`pg_sleep`) returns.
        Type::VOID => Value::Null,
        Type::UUID => Value::Text(
            uuid::Uuid::from_slice(raw)
                .map_err(|_| malformed())?
                .hyphenated()
                .to_string(),
        ),
        Type::DATE => Value::Text(
            date_text(i32::from_be_bytes(fixed(raw).ok_or_else(malformed)?))
                .ok_or_else(|| out_of_range(column, ty))?,
        ),
        Type::TIME => Value::Text(time_text(i64::from_be_bytes(
            fixed(raw).ok_or_else(malformed)?,
        ))),
        Type::TIMESTAMP => Value::Text(
            timestamp_text(i64::from_be_bytes(fixed(raw).ok_or_else(malformed)?), "")
                .ok_or_else(|| out_of_range(column, ty))?,
        ),
        Type::TIMESTAMPTZ => Value::Text(
            timestamp_text(
                i64::from_be_bytes(fixed(raw).ok_or_else(malformed)?),
                "+00:00",
            )
            .ok_or_else(|| out_of_range(column, ty))?,
        ),
        _ if ty.name() == "citext" => text(raw)?,
        _ => {
            return Err(DbError::Operational(format!(
                "column '{column}' has the Postgres type {}, which the sandbox does not convert: cast it in the query ({column}::text)",
                ty.name()
            )));
        }
    })
}

fn out_of_range(column: &str, ty: &Type) -> DbError {
    DbError::Operational(format!(
        "column '{column}': a {} value out of the range the sandbox converts: cast it in the query ({column}::text)",
        ty.name()
    ))
}

/// The decimal text of a `numeric` in binary format (`NaN`, `Infinity` and `-Infinity` as
/// Postgres writes them).
fn numeric_text(raw: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*raw.get(2 * i)?, *raw.get(2 * i + 1)?]))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(1)? as i16);
    let sign = word(2)?;
    let dscale = usize::from(word(3)?);
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        _ => return None,
    }
    let digits: Vec<u16> = (0..ndigits)
        .map(|i| word(4 + i))
        .collect::<Option<Vec<_>>>()?;
    if digits.iter().any(|d| *d > 9999) {
        return None;
    }
    // Digit `k` is worth 10000^(weight - k).
    let digit = |k: i64| -> u16 {
        usize::try_from(k)
            .ok()
            .and_then(|k| digits.get(k).copied())
            .unwrap_or(0)
    };
    let mut out = String::new();
    if sign == 0x4000 {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    } else {
        for k in 0..=weight {
            if k == 0 {
                out.push_str(&digit(k).to_string());
            } else {
                out.push_str(&format!("{:04}", digit(k)));
            }
        }
    }
    if dscale > 0 {
        let mut fraction = String::new();
        let mut k = weight + 1;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", digit(k)));
            k += 1;
        }
        fraction.truncate(dscale);
        out.push('.');
        out.push_str(&fraction);
    }
    Some(out)
}

fn epoch() -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .unwrap_or_default()
}

/// A `date` (days since 2000-01-01) as `YYYY-MM-DD`.
fn date_text(days: i32) -> Option<String> {
    match days {
        i32::MAX => Some("infinity".into()),
        i32::MIN => Some("-infinity".into()),
        _ => epoch()
            .date()
            .checked_add_signed(chrono::TimeDelta::try_days(days.into())?)
            .map(|d| d.format("%Y-%m-%d").to_string()),
    }
}

/// A `time` (microseconds since midnight) as `HH:MM:SS[.ffffff]`.
fn time_text(micros: i64) -> String {
    let (seconds, fraction) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let mut out = format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    if fraction != 0 {
        out.push_str(format!(".{fraction:06}").trim_end_matches('0'));
    }
    out
}

/// A `timestamp` (microseconds since 2000-01-01 00:00:00) as `YYYY-MM-DD HH:MM:SS[.fff]`,
/// then `zone`.
fn timestamp_text(micros: i64, zone: &str) -> Option<String> {
    match micros {
        i64::MAX => Some("infinity".into()),
        i64::MIN => Some("-infinity".into()),
        _ => epoch()
            .checked_add_signed(chrono::TimeDelta::microseconds(micros))
            .map(|t| format!("{}{zone}", t.format("%Y-%m-%d %H:%M:%S%.f"))),
    }
}

/// An error with its causes, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// Postgres's error as the DB-API exception Python's `sqlite3` would raise for its kind.
pub fn error(e: &tokio_postgres::Error) -> DbError {
    let Some(db) = e.as_db_error() else {
        return DbError::Unavailable(format!("the database connection failed: {}", chain(e)));
    };
    let code = db.code().code();
    let message = db.message().to_string();
    let with_hint = || match db.hint() {
        Some(hint) => format!("{message} (hint: {hint})"),
        None => message.clone(),
    };
    match code {
        "57014" => time_limit(),
        "42501" => DbError::Refused(format!(
            "{message}: route code's database role may use only the project's own tables"
        )),
        "25P02" => DbError::Operational(format!(
            "{message} (a statement of this transaction failed: roll it back)"
        )),
        c if c.starts_with("23") => DbError::Integrity(message),
        c if c.starts_with("22") => DbError::Data(message),
        c if c.starts_with("53") || c.starts_with("54") => DbError::Limit(message),
        c if c.starts_with("08") || c.starts_with("57P") => DbError::Unavailable(message),
        _ => DbError::Operational(with_hint()),
    }
}

/// Where in its query a server error points: the byte offset of the character it names.
pub fn error_offset(e: &tokio_postgres::Error, query: &str) -> Option<usize> {
    match e.as_db_error()?.position()? {
        ErrorPosition::Original(position) => {
            let index = usize::try_from(*position).ok()?.checked_sub(1)?;
            Some(
                query
                    .char_indices()
                    .nth(index)
                    .map_or(query.len(), |(at, _)| at),
            )
        }
        ErrorPosition::Internal { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut raw = Vec::new();
        for word in [ndigits, weight as u16, sign, dscale].iter().chain(digits) {
            raw.extend_from_slice(&word.to_be_bytes());
        }
        raw
    }

    #[test]
    fn numerics_read_as_exact_decimal_text() {
        let cases: &[(Vec<u8>, &str)] = &[
            (numeric(2, 0, 0, 2, &[123, 4500]), "123.45"),
            (numeric(0, 0, 0, 0, &[]), "0"),
            (numeric(0, 0, 0, 3, &[]), "0.000"),
            (numeric(1, 1, 0x4000, 0, &[1]), "-10000"),
            (numeric(2, 1, 0, 0, &[12, 34]), "120034"),
            (numeric(1, -2, 0, 8, &[1234]), "0.00001234"),
            (numeric(3, 2, 0, 1, &[1, 0, 5]), "100000005.0"),
            (numeric(0, 0, 0xC000, 0, &[]), "NaN"),
            (numeric(0, 0, 0xD000, 0, &[]), "Infinity"),
            (numeric(0, 0, 0xF000, 0, &[]), "-Infinity"),
        ];
        for (raw, text) in cases {
            assert_eq!(numeric_text(raw).as_deref(), Some(*text));
        }
        assert_eq!(numeric_text(&[0, 1]), None);
        assert_eq!(numeric_text(&numeric(1, 0, 0, 0, &[10000])), None);
    }

    #[test]
    fn dates_and_times_read_as_iso_text() {
        assert_eq!(date_text(0).as_deref(), Some("2000-01-01"));
        assert_eq!(date_text(-1).as_deref(), Some("1999-12-31"));
        assert_eq!(date_text(i32::MAX).as_deref(), Some("infinity"));
        assert_eq!(time_text(0), "00:00:00");
        assert_eq!(time_text(13 * 3_600_000_000 + 5_500_000), "13:00:05.5");
        assert_eq!(time_text(86_400_000_000), "24:00:00");
        assert_eq!(
            timestamp_text(86_400_000_000 + 1_000, "").as_deref(),
            Some("2000-01-02 00:00:00.001")
        );
        assert_eq!(
            timestamp_text(-1, "+00:00").as_deref(),
            Some("1999-12-31 23:59:59.999999+00:00")
        );
        assert_eq!(timestamp_text(i64::MIN, "").as_deref(), Some("-infinity"));
    }

    #[test]
    fn values_decode_by_type() {
        assert_eq!(decode(&Type::BOOL, &[1], "b"), Ok(Value::Integer(1)));
        assert_eq!(
            decode(&Type::INT4, &(-7i32).to_be_bytes(), "i"),
            Ok(Value::Integer(-7))
        );
        assert_eq!(
            decode(&Type::FLOAT4, &1.5f32.to_be_bytes(), "f"),
            Ok(Value::Real(1.5))
        );
        assert_eq!(
            decode(&Type::JSONB, b"\x01{\"a\": 1}", "j"),
            Ok(Value::Text("{\"a\": 1}".into()))
        );
        assert_eq!(
            decode(&Type::UUID, &[0x12; 16], "u"),
            Ok(Value::Text("12121212-1212-1212-1212-121212121212".into()))
        );
        assert!(decode(&Type::INT4, &[1, 2], "i").is_err());
        let error = decode(&Type::INET, &[0; 8], "addr").unwrap_err();
        assert!(
            matches!(&error, DbError::Operational(m) if m.contains("inet") && m.contains("addr::text")),
            "{error:?}"
        );
    }

    #[test]
    fn parameters_are_sent_as_text() {
        let text = |value: Value| {
            let mut out = BytesMut::new();
            let null = TextParam(&value).to_sql(&Type::TEXT, &mut out).unwrap();
            (
                matches!(null, IsNull::Yes),
                String::from_utf8(out.to_vec()).unwrap(),
            )
        };
        assert_eq!(text(Value::Null), (true, String::new()));
        assert_eq!(text(Value::Integer(-3)), (false, "-3".into()));
        assert_eq!(text(Value::Real(0.1)), (false, "0.1".into()));
        assert_eq!(text(Value::Real(1.0)), (false, "1.0".into()));
        assert_eq!(text(Value::Real(f64::NAN)), (false, "NaN".into()));
        assert_eq!(
            text(Value::Real(f64::NEG_INFINITY)),
            (false, "-Infinity".into())
        );
        assert_eq!(text(Value::Blob(vec![0, 255])), (false, "\\x00ff".into()));
        assert!(matches!(
            TextParam(&Value::Null).encode_format(&Type::INT4),
            Format::Text
        ));
    }

    #[test]
    fn transactions_are_tracked_by_first_words() {
        let after =
            |sql: &str, open: bool| transaction_after(sql, &pg_text::keywords(sql, 3), open);
        assert!(after("BEGIN", false));
        assert!(after(
            "start transaction isolation level serializable",
            false
        ));
        assert!(!after("COMMIT", true));
        assert!(!after("end", true));
        assert!(after("COMMIT AND CHAIN", true));
        assert!(!after("ROLLBACK", true));
        assert!(!after("abort", true));
        assert!(after("ROLLBACK TO SAVEPOINT a", true));
        assert!(after("SAVEPOINT a", true));
        assert!(after("SELECT 1", true));
        assert!(!after("SELECT 1", false));
        assert!(!after("PREPARE TRANSACTION 'x'", true));
        assert!(controls_transaction(&pg_text::keywords(
            "release savepoint a",
            2
        )));
        assert!(!controls_transaction(&pg_text::keywords(
            "PREPARE q AS SELECT 1",
            2
        )));
    }

    #[test]
    fn route_code_may_not_touch_host_tables_or_copy() {
        assert!(matches!(
            check_untrusted("SELECT * FROM _filerouter_migrations"),
            Err(DbError::Refused(_))
        ));
        assert!(matches!(
            check_untrusted("SELECT 1; copy t FROM STDIN"),
            Err(DbError::Refused(_))
        ));
        assert!(check_untrusted("INSERT INTO t VALUES ('copy _filerouter_x')").is_ok());
    }

    #[test]
    fn urls_are_checked_and_described_without_the_password() {
        let (config, tls) =
            parse("postgres://app:s3cret@db.internal:6543/shop?sslmode=verify-full").unwrap();
        assert_eq!(target(&config), "db.internal:6543/shop");
        assert_eq!(tls.mode, tls::SslMode::VerifyFull);
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let (config, _) = parse("host=/run/pg user=app").unwrap();
        assert_eq!(target(&config), "/run/pg:5432/app");
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
        let error =
            check_url("postgres://app:s3cret@db/app?sslmode=verify-full&sslrootcert=/no/ca.pem")
                .unwrap_err();
        assert!(
            error.contains("/no/ca.pem") && !error.contains("s3cret"),
            "{error}"
        );
        let error = check_url("postgres://app:s3cret@host:notaport/db").unwrap_err();
        assert!(!error.contains("s3cret"), "{error}");
    }
}
