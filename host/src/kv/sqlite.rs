//! The kv store in a SQLite database: a file of its own in the project's data folder
//! ([`FILE_NAME`], beside the SQL database's), or an in-memory database for a store that need
//! not last (a build's, a test's).
//!
//! Entries live in `_filerouter_kv` (key, JSON text, expiry in Unix milliseconds), and what they
//! cost in `_filerouter_kv_stats`, updated in the same transaction as every write, so the bounds
//! hold across restarts and across processes sharing the file. Every operation is one
//! `BEGIN IMMEDIATE` transaction on a database thread (`crate::db::threads`): SQLite waits for
//! locks and disk there, never on an async or guest thread.
//!
//! The kv file is not the SQL database's file, because SQLite has one write lock per file: kv
//! in the database's file waited for any request's open write transaction (5 s, then
//! `database is locked`), and a kv call inside the request's own transaction could never
//! succeed. So kv and SQL are independent: a kv write is never part of a SQL transaction (it
//! is not rolled back with one), as on Redis. Entries an earlier version kept in the
//! database's file are moved here once, when the store opens ([`SqliteKv::open_in`]).

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Bounds, KvError, cost, expiry, now_ms};

/// How long an operation waits for another writer of the same file before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS _filerouter_kv (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL,
    expires_at INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _filerouter_kv_stats (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    keys INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
INSERT OR IGNORE INTO _filerouter_kv_stats (id, keys, bytes) VALUES (1, 0, 0);
";

/// The kv file's name in the project's data folder.
pub const FILE_NAME: &str = "kv.sqlite3";

/// Move the entries of `legacy`'s `_filerouter_kv` into the store on `conn`: copied in one
/// transaction of the kv file, then dropped from `legacy` in one of its own (a crash between
/// the two copies them again at the next start, keeping the kv file's values).
fn adopt(conn: &Connection, legacy: &Path) -> rusqlite::Result<()> {
    let Some(name) = legacy.to_str() else {
        return Ok(());
    };
    conn.execute("ATTACH DATABASE ?1 AS legacy", [name])?;
    let moved = (|| {
        let present: i64 = conn.query_row(
            "SELECT count(*) FROM legacy.sqlite_schema WHERE name = '_filerouter_kv'",
            [],
            |r| r.get(0),
        )?;
        if present == 0 {
            return Ok(());
        }
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE;
             INSERT OR IGNORE INTO main._filerouter_kv (key, value, expires_at)
                 SELECT key, value, expires_at FROM legacy._filerouter_kv;
             UPDATE main._filerouter_kv_stats SET
                 keys = (SELECT count(*) FROM main._filerouter_kv),
                 bytes = (SELECT coalesce(sum(length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)) + {overhead}), 0) FROM main._filerouter_kv);
             COMMIT;",
            overhead = super::ENTRY_OVERHEAD
        ))?;
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             DROP TABLE legacy._filerouter_kv;
             DROP TABLE IF EXISTS legacy._filerouter_kv_stats;
             COMMIT;",
        )
    })();
    if moved.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    let detached = conn.execute_batch("DETACH DATABASE legacy");
    moved.and(detached)
}

/// Write the entries of the kv file at `file` into the database on `into`, in the layout an
/// earlier version kept in the SQL database's file (`_filerouter_kv`), which
/// [`SqliteKv::open_in`] moves back into a kv file when it opens: how a backup of the SQL
/// database carries the kv store too (`crate::db::backup`). One read transaction of `file`;
/// returns how many entries. Blocking.
pub fn export(file: &Path, into: &Connection) -> rusqlite::Result<i64> {
    let Some(name) = file.to_str() else {
        return Err(rusqlite::Error::InvalidPath(file.to_path_buf()));
    };
    into.execute_batch(SCHEMA)?;
    into.execute("ATTACH DATABASE ?1 AS kvfile", [name])?;
    let copied = into.execute_batch(
        "BEGIN;
         DELETE FROM main._filerouter_kv;
         INSERT INTO main._filerouter_kv (key, value, expires_at)
             SELECT key, value, expires_at FROM kvfile._filerouter_kv;
         UPDATE main._filerouter_kv_stats SET
             keys = (SELECT keys FROM kvfile._filerouter_kv_stats WHERE id = 1),
             bytes = (SELECT bytes FROM kvfile._filerouter_kv_stats WHERE id = 1);
         COMMIT;",
    );
    if copied.is_err() && !into.is_autocommit() {
        let _ = into.execute_batch("ROLLBACK");
    }
    let detached = into.execute_batch("DETACH DATABASE kvfile");
    copied.and(detached)?;
    into.query_row("SELECT count(*) FROM _filerouter_kv", [], |r| r.get(0))
}

/// A store in one SQLite database.
pub struct SqliteKv {
    conn: Arc<Mutex<Connection>>,
}

impl SqliteKv {
    /// The store in the SQLite file at `path`, created with its tables if missing.
    pub fn open(path: &Path) -> Result<Self, KvError> {
        let conn = crate::db::sqlite::open_file(path).map_err(unavailable)?;
        Self::with_connection(conn)
    }

    /// The store in `dir`'s [`FILE_NAME`], after moving into it the entries an earlier version
    /// kept in the SQL database's file `legacy` (its tables are dropped there once copied; a
    /// key already in the kv file keeps its value).
    pub fn open_in(dir: &Path, legacy: &Path) -> Result<Self, KvError> {
        let store = Self::open(&dir.join(FILE_NAME))?;
        if legacy.exists() {
            let conn = store.conn.lock().unwrap_or_else(|e| e.into_inner());
            adopt(&conn, legacy).map_err(|e| {
                KvError::Unavailable(format!(
                    "cannot move the kv entries out of {}: {e}",
                    legacy.display()
                ))
            })?;
        }
        Ok(store)
    }

    /// A store in a private in-memory database.
    pub fn in_memory() -> Self {
        // An in-memory database cannot fail to open but for want of memory; the schema is ours.
        let conn = Connection::open_in_memory().expect("an in-memory SQLite database opens");
        Self::with_connection(conn).expect("the kv schema is valid SQL")
    }

    fn with_connection(conn: Connection) -> Result<Self, KvError> {
        // The host's own statements; no route code's SQL runs here.
        conn.busy_timeout(BUSY_TIMEOUT).map_err(unavailable)?;
        conn.execute_batch(SCHEMA).map_err(unavailable)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Run `op` in one immediate transaction on a blocking thread; commit if it returns `Ok`.
    async fn transaction<T, F>(&self, op: F) -> Result<T, KvError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T, KvError> + Send + 'static,
    {
        let conn = self.conn.clone();
        let blocking = crate::db::threads::run(move || {
            // A panic while holding the lock leaves no half-written entry: SQLite rolled back.
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(unavailable)?;
            let value = op(&tx)?;
            tx.commit().map_err(unavailable)?;
            Ok(value)
        });
        blocking
            .await
            .map_err(|e| KvError::Unavailable(format!("the store's thread failed: {e}")))?
    }

    pub async fn get(&self, key: &str) -> Result<Option<String>, KvError> {
        let key = key.to_string();
        self.transaction(move |tx| Ok(live_value(tx, &key)?.map(|(value, _)| value)))
            .await
    }

    pub async fn delete(&self, key: &str) -> Result<bool, KvError> {
        let key = key.to_string();
        self.transaction(move |tx| {
            let live = live_value(tx, &key)?.is_some();
            remove(tx, &key)?;
            Ok(live)
        })
        .await
    }

    pub async fn incr(
        &self,
        bounds: Bounds,
        key: &str,
        by: i64,
        ttl: Option<Duration>,
    ) -> Result<i64, KvError> {
        let key = key.to_string();
        self.transaction(move |tx| {
            let current = live_value(tx, &key)?;
            let (start, expires) = match &current {
                Some((value, expires)) => (
                    value
                        .trim()
                        .parse::<i64>()
                        .map_err(|_| KvError::NotAnInteger)?,
                    *expires,
                ),
                None => (0, expiry(ttl)),
            };
            let sum = start.checked_add(by).ok_or(KvError::Overflow)?;
            put(tx, bounds, &key, &sum.to_string(), expires)?;
            Ok(sum)
        })
        .await
    }

    pub async fn compare_and_set(
        &self,
        bounds: Bounds,
        key: &str,
        expected: Option<String>,
        value: Option<String>,
        ttl: Option<Duration>,
    ) -> Result<bool, KvError> {
        let key = key.to_string();
        self.transaction(move |tx| {
            let current = live_value(tx, &key)?.map(|(value, _)| value);
            if current != expected {
                return Ok(false);
            }
            match value {
                Some(value) => put(tx, bounds, &key, &value, expiry(ttl))?,
                None => remove(tx, &key)?,
            }
            Ok(true)
        })
        .await
    }

    pub async fn keys(
        &self,
        prefix: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<String>, KvError> {
        let prefix = prefix.to_string();
        self.transaction(move |tx| {
            // The scan starts at the prefix, past `after`, in the primary key's byte order and
            // stops at the first key that no longer has the prefix.
            let mut stmt = tx
                .prepare_cached(
                    "SELECT key FROM _filerouter_kv WHERE key >= ?1 AND (?2 IS NULL OR key > ?2) \
                     AND (expires_at IS NULL OR expires_at > ?3) ORDER BY key LIMIT ?4",
                )
                .map_err(unavailable)?;
            let mut rows = stmt
                .query(params![prefix, after, now_ms(), limit as i64])
                .map_err(unavailable)?;
            let mut keys = Vec::with_capacity(limit);
            while let Some(row) = rows.next().map_err(unavailable)? {
                let key: String = row.get(0).map_err(unavailable)?;
                if !key.starts_with(prefix.as_str()) || keys.len() == limit {
                    break;
                }
                keys.push(key);
            }
            Ok(keys)
        })
        .await
    }

    pub async fn write(
        &self,
        bounds: Bounds,
        entries: Vec<(String, Option<String>)>,
        ttl: Option<Duration>,
    ) -> Result<(), KvError> {
        self.transaction(move |tx| {
            let expires = expiry(ttl);
            for (key, value) in &entries {
                match value {
                    Some(value) => put(tx, bounds, key, value, expires)?,
                    None => remove(tx, key)?,
                }
            }
            Ok(())
        })
        .await
    }
}

fn unavailable(e: impl std::fmt::Display) -> KvError {
    KvError::Unavailable(e.to_string())
}

/// The value under `key` and its expiry, unless absent or expired.
fn live_value(
    tx: &rusqlite::Transaction<'_>,
    key: &str,
) -> Result<Option<(String, Option<i64>)>, KvError> {
    tx.prepare_cached(
        "SELECT value, expires_at FROM _filerouter_kv \
         WHERE key = ?1 AND (expires_at IS NULL OR expires_at > ?2)",
    )
    .and_then(|mut stmt| {
        stmt.query_row(params![key, now_ms()], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()
    })
    .map_err(unavailable)
}

/// What the entries cost together: (keys, bytes).
fn stats(tx: &rusqlite::Transaction<'_>) -> Result<(usize, usize), KvError> {
    tx.query_row(
        "SELECT keys, bytes FROM _filerouter_kv_stats WHERE id = 1",
        [],
        |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
    )
    .map(|(keys, bytes)| (keys.max(0) as usize, bytes.max(0) as usize))
    .map_err(unavailable)
}

fn add_stats(tx: &rusqlite::Transaction<'_>, keys: i64, bytes: i64) -> Result<(), KvError> {
    tx.prepare_cached(
        "UPDATE _filerouter_kv_stats SET keys = keys + ?1, bytes = bytes + ?2 WHERE id = 1",
    )
    .and_then(|mut stmt| stmt.execute(params![keys, bytes]))
    .map(|_| ())
    .map_err(unavailable)
}

/// The cost of the entry stored under `key`, live or expired.
fn stored_cost(tx: &rusqlite::Transaction<'_>, key: &str) -> Result<Option<usize>, KvError> {
    tx.prepare_cached("SELECT length(CAST(value AS BLOB)) FROM _filerouter_kv WHERE key = ?1")
        .and_then(|mut stmt| {
            stmt.query_row(params![key], |row| row.get::<_, i64>(0))
                .optional()
        })
        .map(|len| len.map(|len| key.len() + len.max(0) as usize + super::ENTRY_OVERHEAD))
        .map_err(unavailable)
}

fn remove(tx: &rusqlite::Transaction<'_>, key: &str) -> Result<(), KvError> {
    if let Some(old) = stored_cost(tx, key)? {
        tx.prepare_cached("DELETE FROM _filerouter_kv WHERE key = ?1")
            .and_then(|mut stmt| stmt.execute(params![key]))
            .map_err(unavailable)?;
        add_stats(tx, -1, -(old as i64))?;
    }
    Ok(())
}

/// Store `value` under `key` if the bounds allow, dropping expired entries to make room.
fn put(
    tx: &rusqlite::Transaction<'_>,
    bounds: Bounds,
    key: &str,
    value: &str,
    expires: Option<i64>,
) -> Result<(), KvError> {
    let new = cost(key, value);
    let old = stored_cost(tx, key)?;
    let fits = |(keys, bytes): (usize, usize)| {
        if old.is_none() && keys >= bounds.max_keys {
            return Err(KvError::Full(bounds.max_keys));
        }
        if bytes.saturating_sub(old.unwrap_or(0)) + new > bounds.max_total_bytes {
            return Err(KvError::FullBytes(bounds.max_total_bytes));
        }
        Ok(())
    };
    if fits(stats(tx)?).is_err() {
        drop_expired(tx)?;
        fits(stats(tx)?)?;
    }
    tx.prepare_cached(
        "INSERT INTO _filerouter_kv (key, value, expires_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
    )
    .and_then(|mut stmt| stmt.execute(params![key, value, expires]))
    .map_err(unavailable)?;
    let added_key = i64::from(old.is_none());
    add_stats(tx, added_key, new as i64 - old.unwrap_or(0) as i64)
}

/// Delete expired entries and give back what they cost.
fn drop_expired(tx: &rusqlite::Transaction<'_>) -> Result<(), KvError> {
    let now = now_ms();
    let (count, bytes): (i64, i64) = tx
        .query_row(
            "SELECT count(*), coalesce(sum(length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)) + ?2), 0) \
             FROM _filerouter_kv WHERE expires_at IS NOT NULL AND expires_at <= ?1",
            params![now, super::ENTRY_OVERHEAD as i64],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(unavailable)?;
    if count > 0 {
        tx.execute(
            "DELETE FROM _filerouter_kv WHERE expires_at IS NOT NULL AND expires_at <= ?1",
            params![now],
        )
        .map_err(unavailable)?;
        add_stats(tx, -count, -bytes)?;
    }
    Ok(())
}
