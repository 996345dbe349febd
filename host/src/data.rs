//! Where a project's data lives: its SQL database ([`crate::db`]) and its key-value store
//! ([`crate::kv`]), both in one SQLite file in the project's data folder.
//!
//! The data folder is `.data/` in the project unless `--data-dir` (or `data_dir` in
//! tenants.toml) says otherwise; `build` and `clean` never touch it. One [`Data`] per project
//! (or tenant) per process, kept across `dev`'s reloads; every request of the project shares it.
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
    #[error("the database in {dir}: {error}")]
    Database { dir: String, error: db::DbError },
    #[error("the kv store in {dir}: {error}")]
    Kv { dir: String, error: kv::KvError },
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
        let shown = dir.display().to_string();
        let database = db::Database::open(dir, db).map_err(|error| DataError::Database {
            dir: shown.clone(),
            error,
        })?;
        let store = kv::KvStore::sqlite(&dir.join(db::FILE_NAME), kv)
            .map_err(|error| DataError::Kv { dir: shown, error })?;
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
            Arc::new(self.db.with_bounds(db).map_err(|error| {
                DataError::Database {
                    dir: self
                        .db
                        .path()
                        .map_or_else(|| "memory".into(), |p| p.display().to_string()),
                    error,
                }
            })?)
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
