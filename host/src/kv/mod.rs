//! The key-value store that route code reaches as `filerouter.kv`: state that outlives a request.
//!
//! One store per project (or tenant), shared by all of its requests and by every `filerouter
//! run` process that points at the same backend. Values are JSON text, encoded and decoded by
//! the guest; entries may expire. Two backends keep the entries:
//!
//! - [`sqlite`] (the default): a table in the project's SQLite file. Durable, so what a call
//!   stored survives a restart, and other processes on the machine that open the same file see
//!   it. A store that need not last (a build's, a test's) is the same code on an in-memory
//!   database.
//! - [`redis`]: keys under a prefix on a Redis server, for several processes on different
//!   machines that share one project's state. Tenants sharing a server each have their prefix.
//!
//! Both enforce [`Bounds`], so that route code cannot exhaust the host's memory or
//! disk, and offer the same operations, with the same errors: `get`, `set`, `delete`, `incr`,
//! `compare_and_set`, `keys` (by prefix, paged) and `write` (several keys at once, all or none),
//! each atomic. Not for: SQL (that is [`crate::db`]), nor anything route code did not ask for.

pub mod redis;
pub mod sqlite;

use std::{sync::Arc, time::Duration};

/// The limits of one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_keys: usize,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
    /// Keys and values of all entries together (each entry also counts [`ENTRY_OVERHEAD`]).
    pub max_total_bytes: usize,
    /// The longest time to live.
    pub max_ttl: Duration,
}

/// What one entry costs beyond its key and value, for [`Bounds::max_total_bytes`].
pub const ENTRY_OVERHEAD: usize = 64;

/// The most keys one `keys` call returns, and the most entries one `write` takes.
pub const MAX_BATCH: usize = 1000;

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_keys: 100_000,
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
            max_total_bytes: 64 * 1024 * 1024,
            max_ttl: Duration::from_secs(10 * 365 * 24 * 3600),
        }
    }
}

/// Why the store refused an operation; the message goes back to the guest.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    #[error("kv keys are at most {0} bytes")]
    KeyTooLong(usize),
    #[error("kv values are at most {0} bytes of JSON")]
    ValueTooLarge(usize),
    #[error("the kv store is full ({0} keys); delete keys or give them a ttl")]
    Full(usize),
    #[error("the kv store is full ({0} bytes of keys and values); delete keys or give them a ttl")]
    FullBytes(usize),
    #[error("a kv ttl is at most {0} seconds")]
    TtlTooLong(u64),
    #[error("the value under this key is not an integer")]
    NotAnInteger,
    #[error("integer overflow")]
    Overflow,
    #[error("at most {MAX_BATCH} keys at once ({0} given)")]
    TooMany(usize),
    #[error("the kv store is unavailable: {0}")]
    Unavailable(String),
}

/// One project's store: its bounds and the backend that keeps the entries.
pub struct KvStore {
    bounds: Bounds,
    backend: Arc<Backend>,
}

enum Backend {
    Sqlite(sqlite::SqliteKv),
    /// Boxed: the client and its connection are large beside a SQLite handle.
    Redis(Box<redis::RedisKv>),
}

impl Default for KvStore {
    /// A store that lasts as long as the value (an in-memory database): for builds and tests.
    fn default() -> Self {
        Self::in_memory(Bounds::default())
    }
}

impl KvStore {
    /// A store that lasts as long as the value (an in-memory database).
    pub fn in_memory(bounds: Bounds) -> Self {
        Self {
            bounds,
            backend: Arc::new(Backend::Sqlite(sqlite::SqliteKv::in_memory())),
        }
    }

    /// The store kept in the SQLite file at `path` (created if missing).
    pub fn sqlite(path: &std::path::Path, bounds: Bounds) -> Result<Self, KvError> {
        Ok(Self {
            bounds,
            backend: Arc::new(Backend::Sqlite(sqlite::SqliteKv::open(path)?)),
        })
    }

    /// The store kept in the data folder `dir` ([`sqlite::FILE_NAME`]), after moving in the
    /// entries an earlier version kept in the SQL database's file `legacy`.
    pub fn sqlite_in(
        dir: &std::path::Path,
        legacy: &std::path::Path,
        bounds: Bounds,
    ) -> Result<Self, KvError> {
        Ok(Self {
            bounds,
            backend: Arc::new(Backend::Sqlite(sqlite::SqliteKv::open_in(dir, legacy)?)),
        })
    }

    /// The store under `prefix` (e.g. `filerouter:t:acme:`) on the Redis server at `url`
    /// (`redis://[user:password@]host[:port][/db]`). Only parses the URL: the first operation
    /// connects, and a server that cannot be reached makes operations fail with
    /// [`KvError::Unavailable`] (never showing the URL's password) until it can. Two stores
    /// meet if one's prefix begins the other's (`app:` and `app:v:x:`): the caller gives
    /// prefixes where none does (`crate::data::KvPrefix`).
    pub fn redis(url: &str, prefix: &str, bounds: Bounds) -> Result<Self, KvError> {
        Ok(Self {
            bounds,
            backend: Arc::new(Backend::Redis(Box::new(redis::RedisKv::new(url, prefix)?))),
        })
    }

    /// The same entries under other `bounds` (a tenant reconfigured). Entries past the new
    /// bounds stay until they are deleted or expire; new ones must fit.
    pub fn with_bounds(&self, bounds: Bounds) -> Arc<KvStore> {
        Arc::new(KvStore {
            bounds,
            backend: self.backend.clone(),
        })
    }

    /// The bounds this store enforces.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// The value under `key`, unless absent or expired.
    pub async fn get(&self, key: &str) -> Result<Option<String>, KvError> {
        match &*self.backend {
            Backend::Sqlite(s) => s.get(key).await,
            Backend::Redis(r) => r.get(key).await,
        }
    }

    /// Store `value` under `key`, for `ttl` if given.
    pub async fn set(
        &self,
        key: &str,
        value: String,
        ttl: Option<Duration>,
    ) -> Result<(), KvError> {
        self.write(vec![(key.to_string(), Some(value))], ttl).await
    }

    /// Remove `key`; whether it was there (and live).
    pub async fn delete(&self, key: &str) -> Result<bool, KvError> {
        match &*self.backend {
            Backend::Sqlite(s) => s.delete(key).await,
            Backend::Redis(r) => r.delete(key).await,
        }
    }

    /// Add `by` to the integer under `key` (absent: 0) and return the sum, atomically. `ttl`
    /// applies when the key is created.
    pub async fn incr(&self, key: &str, by: i64, ttl: Option<Duration>) -> Result<i64, KvError> {
        self.check_key(key)?;
        self.check_ttl(ttl)?;
        match &*self.backend {
            Backend::Sqlite(s) => s.incr(self.bounds, key, by, ttl).await,
            Backend::Redis(r) => r.incr(self.bounds, key, by, ttl).await,
        }
    }

    /// If the value under `key` is `expected` (`None`: absent), replace it with `value`
    /// (`None`: delete), atomically; whether it did.
    pub async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<String>,
        value: Option<String>,
        ttl: Option<Duration>,
    ) -> Result<bool, KvError> {
        self.check_key(key)?;
        if let Some(value) = &value {
            self.check_value(value)?;
        }
        self.check_ttl(ttl)?;
        match &*self.backend {
            Backend::Sqlite(s) => {
                s.compare_and_set(self.bounds, key, expected, value, ttl)
                    .await
            }
            Backend::Redis(r) => {
                r.compare_and_set(self.bounds, key, expected, value, ttl)
                    .await
            }
        }
    }

    /// Live keys starting with `prefix`, in byte order, after `after`, at most `limit`
    /// (capped at [`MAX_BATCH`]).
    pub async fn keys(
        &self,
        prefix: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<String>, KvError> {
        self.check_key(prefix)?;
        let limit = limit.clamp(1, MAX_BATCH);
        match &*self.backend {
            Backend::Sqlite(s) => s.keys(prefix, after, limit).await,
            Backend::Redis(r) => r.keys(prefix, after, limit).await,
        }
    }

    /// Set (`Some`) and delete (`None`) several keys at once: all, or none on an error.
    pub async fn write(
        &self,
        entries: Vec<(String, Option<String>)>,
        ttl: Option<Duration>,
    ) -> Result<(), KvError> {
        if entries.len() > MAX_BATCH {
            return Err(KvError::TooMany(entries.len()));
        }
        for (key, value) in &entries {
            self.check_key(key)?;
            if let Some(value) = value {
                self.check_value(value)?;
            }
        }
        self.check_ttl(ttl)?;
        if entries.is_empty() {
            return Ok(());
        }
        match &*self.backend {
            Backend::Sqlite(s) => s.write(self.bounds, entries, ttl).await,
            Backend::Redis(r) => r.write(self.bounds, entries, ttl).await,
        }
    }

    fn check_key(&self, key: &str) -> Result<(), KvError> {
        if key.len() > self.bounds.max_key_bytes {
            return Err(KvError::KeyTooLong(self.bounds.max_key_bytes));
        }
        Ok(())
    }

    fn check_value(&self, value: &str) -> Result<(), KvError> {
        if value.len() > self.bounds.max_value_bytes {
            return Err(KvError::ValueTooLarge(self.bounds.max_value_bytes));
        }
        Ok(())
    }

    fn check_ttl(&self, ttl: Option<Duration>) -> Result<(), KvError> {
        match ttl {
            Some(ttl) if ttl > self.bounds.max_ttl => {
                Err(KvError::TtlTooLong(self.bounds.max_ttl.as_secs()))
            }
            _ => Ok(()),
        }
    }
}

/// What one entry costs against [`Bounds::max_total_bytes`].
pub fn cost(key: &str, value: &str) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

/// Milliseconds since the Unix epoch, the clock expiry times are kept in (they must mean the
/// same after a restart and on another machine).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// When an entry written now with `ttl` expires, in [`now_ms`] time.
pub fn expiry(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|ttl| now_ms().saturating_add(ttl.as_millis().min(i64::MAX as u128) as i64))
}

#[cfg(test)]
mod tests;
