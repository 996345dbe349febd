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
    #[error("the kv prefix {0}")]
    KvPrefix(#[from] KvPrefixError),
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
    /// Where the project's keys live on the Redis server.
    pub kv_prefix: KvPrefix,
    /// The Postgres pool's size and timeouts.
    pub pool: db::postgres::PoolSettings,
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
    /// The build's data: a throwaway key-value store, and no project database but private
    /// `:memory:` ones ([`db::Database::for_build`]).
    pub fn for_build() -> Self {
        Data {
            kv: Arc::new(kv::KvStore::default()),
            db: Arc::new(db::Database::for_build()),
        }
    }

    /// Whether the project's database and kv store answer now, each within `within`: a
    /// `SELECT 1` on Postgres (SQLite is a file, always there), a read on the kv store. For
    /// readiness probes (`crate::health`); `Err` says which did not answer, without secrets.
    pub async fn answers(&self, within: std::time::Duration) -> Result<(), String> {
        if let Some(pool) = self.db.postgres() {
            let ping = async {
                let mut connection = pool.host().await.map_err(|e| e.to_string())?;
                connection
                    .host_script("SELECT 1")
                    .await
                    .map_err(|e| e.to_string())
            };
            match tokio::time::timeout(within, ping).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("the database does not answer: {e}")),
                Err(_) => {
                    return Err(format!("the database did not answer within {within:?}"));
                }
            }
        }
        match tokio::time::timeout(within, self.kv.get("filerouter-readiness")).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("the kv store does not answer: {e}")),
            Err(_) => Err(format!("the kv store did not answer within {within:?}")),
        }
    }

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
                    runtime.block_on(db::Database::connect_postgres(
                        url.expose(),
                        db,
                        servers.pool,
                    ))
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
                let prefix = servers.kv_prefix.key_prefix()?;
                let store = kv::KvStore::redis(url.expose(), &prefix, kv).map_err(|error| {
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

/// Where one project's (or tenant's) keys live on a shared Redis server.
///
/// The spaces filerouter makes are `filerouter:p:NAME:` for a single project (NAME: the
/// project folder's name) and `filerouter:t:NAME:` for a tenant, NAME [escaped](escape_name)
/// so that it holds no `:`. No such prefix is the beginning of another (each ends at the first
/// `:` after its NAME, and `p` and `t` differ), so no two spaces can meet, whatever keys route
/// code writes under them. An operator's `--kv-prefix` is used as given, but may not touch
/// `filerouter:` (neither may start with the other): filerouter's spaces stay its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvPrefix {
    /// A single project, by its folder's name.
    Project(String),
    /// A tenant, by its name in the tenants file.
    Tenant(String),
    /// What the operator gave (`--kv-prefix`).
    Operator(String),
}

/// Where filerouter's own kv spaces begin on a Redis server.
pub const KV_ROOT: &str = "filerouter:";

/// Why an operator's kv prefix is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvPrefixError {
    #[error(
        "{0:?} (--kv-prefix) overlaps filerouter's own keys, which start with {KV_ROOT:?} (single projects under filerouter:p:NAME:, tenants under filerouter:t:NAME:): choose a prefix that does not start with {KV_ROOT:?}, such as \"myapp:\", or leave out --kv-prefix"
    )]
    Reserved(String),
}

impl Default for KvPrefix {
    fn default() -> Self {
        KvPrefix::Project("project".into())
    }
}

impl KvPrefix {
    /// The prefix of every Redis key of the store, or why the operator's is refused.
    pub fn key_prefix(&self) -> Result<String, KvPrefixError> {
        match self {
            KvPrefix::Project(name) => Ok(format!("{KV_ROOT}p:{}:", escape_name(name))),
            KvPrefix::Tenant(name) => Ok(format!("{KV_ROOT}t:{}:", escape_name(name))),
            KvPrefix::Operator(prefix) => {
                if prefix.starts_with(KV_ROOT) || KV_ROOT.starts_with(prefix.as_str()) {
                    Err(KvPrefixError::Reserved(prefix.clone()))
                } else {
                    Ok(prefix.clone())
                }
            }
        }
    }
}

/// `name` with `%` written `%25` and `:` written `%3A`: no `:` is left, and two names stay
/// two (the escape character is escaped too).
pub fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

/// Where a project's keys live on a shared Redis server when the operator names no prefix:
/// the project folder's name.
pub fn default_kv_prefix(root: &Path) -> KvPrefix {
    let name = root
        .file_name()
        .map_or_else(|| "project".into(), |n| n.to_string_lossy().into_owned());
    KvPrefix::Project(name)
}

/// Where a tenant's keys live on a shared Redis server (always there).
pub fn tenant_kv_prefix(tenant: &str) -> KvPrefix {
    KvPrefix::Tenant(tenant.to_string())
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
        let prefix = |p: KvPrefix| p.key_prefix().unwrap();
        assert_eq!(
            prefix(default_kv_prefix(Path::new("/srv/shop"))),
            "filerouter:p:shop:"
        );
        assert_eq!(prefix(tenant_kv_prefix("acme")), "filerouter:t:acme:");
        assert_eq!(prefix(KvPrefix::Operator("myapp:".into())), "myapp:");
    }

    #[test]
    fn no_prefix_is_the_beginning_of_another() {
        // The reported collision: a project folder named `tenant` and a tenant `v`.
        let names = [
            "tenant", "v", "tenant:v", "v:", ":", "", "%", "%3A", "%253A", "a%3Ab", "a:b", "t",
            "p", "t:v", "p:x", "tenant:", "x:y:z", " ",
        ];
        let mut all = Vec::new();
        for name in names {
            all.push(KvPrefix::Project(name.into()).key_prefix().unwrap());
            all.push(KvPrefix::Tenant(name.into()).key_prefix().unwrap());
        }
        all.push(KvPrefix::Operator("myapp:".into()).key_prefix().unwrap());
        all.push(
            KvPrefix::Operator("filerouteR:".into())
                .key_prefix()
                .unwrap(),
        );
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                assert!(i == j || !b.starts_with(a.as_str()), "{a:?} begins {b:?}");
            }
        }
    }

    #[test]
    fn operator_prefixes_may_not_touch_filerouters_spaces() {
        for prefix in [
            "filerouter:t:v:",
            "filerouter:tenant:",
            "filerouter:p:shop:",
            "filerouter:",
            "filerouter",
            "f",
            "",
        ] {
            let error = KvPrefix::Operator(prefix.into()).key_prefix().unwrap_err();
            assert!(
                error.to_string().contains("overlaps filerouter's own keys"),
                "{error}"
            );
        }
    }
}
