//! Where a project's data lives: its SQL database ([`crate::db`]) and its key-value store
//! ([`crate::kv`]), both in one SQLite file in the project's data folder, unless the operator
//! names servers for them ([`Servers`]: a Postgres database, a Redis server), so that several
//! `filerouter run` processes share them.
//!
//! The data folder is `.data/` in the project unless `--data-dir` (or `data_dir` in
//! tenants.toml) says otherwise; `build` and `clean` never touch it. One [`Data`] per project
//! (or tenant) per process, kept across `dev`'s reloads; every request of the project shares it.
//! Server URLs are operator settings (flags, environment, tenants.toml), never the project's
//! source; they may hold a password, which no message shows ([`redact_url`], [`ServerUrl`]).
//! Not for: what runs the statements (that is [`crate::db`]), nor the build cache.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use crate::{db, kv};

/// The folder, relative to the project, when nothing says otherwise.
pub const DEFAULT_DIR: &str = ".data";

/// One project's data.
#[derive(Clone)]
pub struct Data {
    pub kv: Arc<kv::KvStore>,
    pub db: Arc<db::Database>,
}

/// Why a project's data could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// `place`: `in FOLDER` or `at URL` (without its password).
    #[error("the database {place}: {error}")]
    Database { place: String, error: db::DbError },
    #[error("the kv store {place}: {error}")]
    Kv { place: String, error: kv::KvError },
}

/// A server's URL as the operator gave it, which may hold a password: shown (`Display`,
/// `Debug`) without it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl(String);

impl ServerUrl {
    pub fn new(url: impl Into<String>) -> ServerUrl {
        ServerUrl(url.into())
    }

    /// The URL itself, password and all: only for connecting.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl std::fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerUrl({})", redact_url(&self.0))
    }
}

/// `url` without its password, for log lines and errors: `scheme://user:***@host/...`, a
/// `password=` (or `pass=`) query parameter or connection-string key as `***`.
pub fn redact_url(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _)) => format!("{user}:***@{host}"),
                    None => format!("{userinfo}@{host}"),
                },
                None => authority.to_string(),
            };
            format!("{scheme}://{authority}{tail}")
        }
        None => url.to_string(),
    };
    // `password=...` in a query string or a key-value connection string.
    for key in ["password", "pass"] {
        let mut from = 0;
        while let Some(found) = out[from..].to_ascii_lowercase().find(key) {
            let at = from + found;
            let before = out[..at].chars().next_back();
            let after_key = out[at + key.len()..].trim_start();
            let boundary = before.is_none_or(|c| matches!(c, '?' | '&' | ' ' | '\t'));
            if !(boundary && after_key.starts_with('=')) {
                from = at + key.len();
                continue;
            }
            let value_start = out.len() - after_key.len() + 1;
            let rest = &out[value_start..];
            let skipped = rest.len() - rest.trim_start().len();
            let value_start = value_start + skipped;
            let rest = &out[value_start..];
            let value_len = if let Some(quoted) = rest.strip_prefix('\'') {
                quoted.find('\'').map_or(rest.len(), |n| n + 2)
            } else {
                rest.find(['&', ' ', '#']).unwrap_or(rest.len())
            };
            out.replace_range(value_start..value_start + value_len, "***");
            from = value_start + 3;
        }
    }
    out
}

/// Servers that keep a project's data instead of its data folder: operator settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Servers {
    /// The Postgres database (`postgres://user:password@host:port/db`).
    pub database_url: Option<ServerUrl>,
    /// The Redis server for `filerouter.kv` (`redis://[user:password@]host:port[/db]`).
    pub kv_url: Option<ServerUrl>,
    /// The prefix of the project's keys on the Redis server (`filerouter:NAME:`).
    pub kv_prefix: String,
}

impl Default for Data {
    /// Data that lasts as long as the value: for a build (route modules are imported, no request
    /// runs) and for the server's own calls (`config.py`).
    fn default() -> Self {
        Data {
            kv: Arc::new(kv::KvStore::default()),
            db: Arc::new(db::Database::none()),
        }
    }
}

impl Data {
    /// The data in `dir` (created if missing), under these bounds. Blocking.
    pub fn open(dir: &Path, kv: kv::Bounds, db: db::Bounds) -> Result<Data, DataError> {
        Self::open_with(dir, kv, db, &Servers::default())
    }

    /// The data in `dir`, except what `servers` keeps: the database in Postgres, the kv store
    /// in Redis (each connected to once now, so a wrong URL stops the start). The folder is
    /// created only if something stays in it. Blocking: call it off the async threads, within
    /// the runtime that serves the project (the database's connections live on it).
    pub fn open_with(
        dir: &Path,
        kv: kv::Bounds,
        db: db::Bounds,
        servers: &Servers,
    ) -> Result<Data, DataError> {
        let in_dir = format!("in {}", dir.display());
        let runtime = || {
            tokio::runtime::Handle::try_current()
                .map_err(|_| db::DbError::Unavailable("no async runtime to connect on".into()))
        };
        let database = match &servers.database_url {
            Some(url) => {
                let place = format!("at {url}");
                let connected = runtime().and_then(|runtime| {
                    runtime.block_on(db::Database::connect_postgres(url.expose(), db))
                });
                connected.map_err(|error| DataError::Database { place, error })?
            }
            None => db::Database::open(dir, db).map_err(|error| DataError::Database {
                place: in_dir.clone(),
                error,
            })?,
        };
        let store = match &servers.kv_url {
            Some(url) => {
                let place = format!("at {url}");
                let store =
                    kv::KvStore::redis(url.expose(), &servers.kv_prefix, kv).map_err(|error| {
                        DataError::Kv {
                            place: place.clone(),
                            error,
                        }
                    })?;
                // Reach it once now: a wrong URL or a server that is down stops the start.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime
                        .block_on(store.get(""))
                        .map_err(|error| DataError::Kv { place, error })?;
                }
                store
            }
            None => {
                if servers.database_url.is_some() {
                    tracing::warn!(
                        "filerouter.kv stays in the SQLite file {in_dir} while the database is in Postgres: processes on other machines do not share it (give a --kv-url for that)"
                    );
                    std::fs::create_dir_all(dir).map_err(|e| DataError::Kv {
                        place: in_dir.clone(),
                        error: kv::KvError::Unavailable(format!(
                            "cannot create the data folder: {e}"
                        )),
                    })?;
                }
                kv::KvStore::sqlite_in(dir, &dir.join(db::FILE_NAME), kv).map_err(|error| {
                    DataError::Kv {
                        place: in_dir.clone(),
                        error,
                    }
                })?
            }
        };
        Ok(Data {
            kv: Arc::new(store),
            db: Arc::new(database),
        })
    }

    /// The same data under other bounds (a tenant reconfigured).
    pub fn with_bounds(&self, kv: kv::Bounds, db: db::Bounds) -> Result<Data, DataError> {
        let kv = if self.kv.bounds() == kv {
            self.kv.clone()
        } else {
            self.kv.with_bounds(kv)
        };
        let db = if self.db.bounds() == db {
            self.db.clone()
        } else {
            Arc::new(
                self.db
                    .with_bounds(db)
                    .map_err(|error| DataError::Database {
                        place: self.db.describe(),
                        error,
                    })?,
            )
        };
        Ok(Data { kv, db })
    }
}

/// The data folder of the project at `root`: `flag` (relative to the current folder) if given,
/// else `FILEROUTER_DATA_DIR`, else `.data/` in the project.
pub fn dir(root: &Path, flag: Option<&Path>) -> PathBuf {
    if let Some(flag) = flag {
        return std::path::absolute(flag).unwrap_or_else(|_| flag.to_path_buf());
    }
    if let Some(env) = std::env::var_os("FILEROUTER_DATA_DIR").filter(|v| !v.is_empty()) {
        let env = PathBuf::from(env);
        return std::path::absolute(&env).unwrap_or(env);
    }
    root.join(DEFAULT_DIR)
}

/// The prefix of a project's keys on a shared Redis server when the operator names none:
/// `filerouter:` and the project folder's name.
pub fn default_kv_prefix(root: &Path) -> String {
    let name = root
        .file_name()
        .map_or_else(|| "project".into(), |n| n.to_string_lossy().into_owned());
    format!("filerouter:{name}:")
}

/// The prefix of a tenant's keys on a shared Redis server (always this one).
pub fn tenant_kv_prefix(tenant: &str) -> String {
    format!("filerouter:tenant:{tenant}:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_their_password() {
        for (url, shown) in [
            (
                "postgres://app:s3cret@db:5432/app",
                "postgres://app:***@db:5432/app",
            ),
            ("postgres://app@db/app", "postgres://app@db/app"),
            ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
            ("redis://cache:6379", "redis://cache:6379"),
            (
                "postgres://db/app?user=app&password=s3cret&sslmode=disable",
                "postgres://db/app?user=app&password=***&sslmode=disable",
            ),
            (
                "unix:///run/redis.sock?pass=s3cret",
                "unix:///run/redis.sock?pass=***",
            ),
            (
                "host=db user=app password = 's3 cret' dbname=app",
                "host=db user=app password = *** dbname=app",
            ),
            ("postgres://a:b@c@host/db", "postgres://a:***@host/db"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!format!("{:?}", ServerUrl::new(url)).contains("s3cret"));
        }
    }

    #[test]
    fn prefixes_name_the_project_or_tenant() {
        assert_eq!(
            default_kv_prefix(Path::new("/srv/shop")),
            "filerouter:shop:"
        );
        assert_eq!(tenant_kv_prefix("acme"), "filerouter:tenant:acme:");
    }
}
