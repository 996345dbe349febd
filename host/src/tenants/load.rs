//! Loading one project from its build cache into a servable [`App`]: the same steps for
//! `filerouter run --project` and for each tenant of `run --tenants`.
//!
//! Read and verify the cache (checksum, key), write its memory image once to a file and map it
//! once its bytes hash as the cache records (the code is the engine's, compiled once per
//! process), link the guest, and rebuild the route table from the cache's metadata. Blocking: call it from `spawn_blocking`. It reads no route source and runs no
//! project code.

use std::{path::Path, time::SystemTime};

use crate::{
    app::{App, Loaded},
    cache::{self, CacheKey},
    config::Settings,
    data::Data,
    environment::Environment,
    mode::Mode,
    project::Project,
    sandbox::{
        Limits, Sandbox,
        engine::{self, SandboxEngine},
    },
    scheduler::Queue,
};

/// When a file was last replaced: its modification time, size and inode. A build renames a new
/// cache file over the old one (as editors do with the tenants file), so any new build changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl CacheStamp {
    /// The stamp of the cache in `dir`, or `None` if it has no bundle.
    pub fn of(dir: &Path) -> Option<CacheStamp> {
        Self::of_file(&cache::bundle_path(dir))
    }

    /// The stamp of the file at `path`, or `None` if there is none.
    pub fn of_file(path: &Path) -> Option<CacheStamp> {
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some(CacheStamp {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode,
        })
    }
}

/// A project loaded from its cache.
pub struct LoadedProject {
    pub app: App,
    pub settings: Settings,
    pub created_at: String,
    pub routes: usize,
    /// The cache as it was when loading started.
    pub stamp: Option<CacheStamp>,
}

/// Why a project could not be loaded: one line.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("the build cache's plugins: {0}")]
    Plugins(String),
    /// `config.py`'s `outbound` (as the build recorded it) cannot be used.
    #[error("outbound: {0}")]
    Outbound(String),
}

impl LoadError {
    /// Whether the failure is the moment's rather than the cache's: the cache could not be
    /// read (any I/O error: out of file descriptors, out of memory, interrupted, ...), or a
    /// step after reading failed with one of those ([`names_transient_os_error`]). Then the
    /// same cache may load on the next try. Otherwise the bytes were read and refused
    /// (checksum, key, format, version, sections, an image hash that does not match), or
    /// the cache is missing or not a regular file: the cache itself cannot be used.
    pub fn is_transient(&self) -> bool {
        match self {
            LoadError::Cache(cache::CacheError::Io { .. }) => true,
            LoadError::Cache(cache::CacheError::File(crate::regular_file::FileError::Io {
                ..
            })) => true,
            LoadError::Cache(_) => false,
            LoadError::Engine(error) => names_transient_os_error(&error.to_string()),
            LoadError::Sandbox(error) => names_transient_os_error(&error.to_string()),
            LoadError::Plugins(message) => names_transient_os_error(message),
            LoadError::Outbound(_) => false,
        }
    }
}

/// Whether `message` (an error turned into text by a lower layer) names an operating-system
/// error that passes: out of file descriptors (`EMFILE`, `ENFILE`), out of memory (`ENOMEM`),
/// interrupted (`EINTR`) or to be tried again (`EAGAIN`).
pub fn names_transient_os_error(message: &str) -> bool {
    [
        libc::EMFILE,
        libc::ENFILE,
        libc::ENOMEM,
        libc::EINTR,
        libc::EAGAIN,
    ]
    .iter()
    .any(|code| message.contains(&format!("(os error {code})")))
        || [
            "Too many open files",
            "Cannot allocate memory",
            "Resource temporarily unavailable",
            "Interrupted system call",
        ]
        .iter()
        .any(|text| message.contains(text))
}

/// Read and verify the cache in `dir`; also returns its stamp from before it was read.
pub fn open(
    dir: &Path,
    key: Option<&CacheKey>,
) -> Result<(cache::Opened, Option<CacheStamp>), LoadError> {
    let stamp = CacheStamp::of(dir);
    Ok((cache::open(dir, key)?, stamp))
}

/// Make the opened cache servable with `engine`. `limits` gives the sandbox limits from the
/// build's settings (a tenant's come from tenants.toml instead); `data` is the project's
/// database and kv store; `environment` the settings and secrets its route code is given
/// (read by the caller: the cache holds none); its requests wait for their turn in `queue`;
/// `outbound` makes its outbound gate from the build's settings (a tenant's narrowed by the
/// tenants file).
#[allow(clippy::too_many_arguments)]
pub fn serve_from(
    engine: &SandboxEngine,
    root: &Path,
    opened: &cache::Opened,
    stamp: Option<CacheStamp>,
    limits: impl FnOnce(&Settings) -> Limits,
    outbound: impl FnOnce(&Settings) -> Result<std::sync::Arc<crate::outbound::Gate>, String>,
    data: Data,
    queue: Queue,
    environment: Environment,
) -> Result<LoadedProject, LoadError> {
    // The memory image's file is checked against the hash the verified cache records, on
    // every load, before it is mapped; the code is the engine's, shared by every project.
    let guest = engine.baked_guest(&opened.image_hash()?, || {
        opened.image().map_err(|e| e.to_string())
    })?;
    let settings = opened.metadata.settings.clone();
    let sealed = crate::plugins::sealed::decode(&opened.plugins).map_err(LoadError::Plugins)?;
    let plugins = crate::plugins::Plugins::from_sealed(root, &settings.plugins, &sealed)
        .map_err(|e| LoadError::Plugins(e.to_string()))?;
    let gate = outbound(&settings).map_err(LoadError::Outbound)?;
    let sandbox = Sandbox::with_data(guest, None, limits(&settings), data, queue)?
        .with_plugins(plugins)
        .with_environment(environment)
        .with_outbound(gate);
    let project = Project::from_cache(&opened.metadata.routes, &opened.metadata.root_files);
    let routes = project.routes.len();
    let app = App::new(
        root.to_path_buf(),
        Mode::Production,
        Loaded::new(project, sandbox, settings.clone(), None),
    );
    Ok(LoadedProject {
        app,
        settings,
        created_at: opened.manifest.created_at.clone(),
        routes,
        stamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cache::CacheError, regular_file::FileError};

    #[test]
    fn read_errors_are_transient_and_refused_bytes_are_not() {
        let io = |reason: &str| {
            LoadError::Cache(CacheError::File(FileError::Io {
                path: "bundle.bin".into(),
                reason: reason.into(),
            }))
        };
        assert!(io("Too many open files (os error 24)").is_transient());
        assert!(io("Permission denied (os error 13)").is_transient());
        assert!(
            LoadError::Cache(CacheError::Io {
                path: "x".into(),
                reason: "Cannot allocate memory (os error 12)".into(),
            })
            .is_transient()
        );
        assert!(!LoadError::Cache(CacheError::Seal(cache::SealError::Checksum)).is_transient());
        assert!(!LoadError::Cache(CacheError::Seal(cache::SealError::Decrypt)).is_transient());
        assert!(!LoadError::Cache(CacheError::Missing("dir".into())).is_transient());
        assert!(
            !LoadError::Cache(CacheError::OtherVersion {
                found: "0.0.1".into(),
                expected: "0.1.0".into(),
            })
            .is_transient()
        );
        assert!(
            !LoadError::Engine(engine::EngineError::Image(
                crate::sandbox::image::ImageError::File {
                    path: "x.img".into(),
                    reason: "does not hash".into()
                }
            ))
            .is_transient()
        );
        assert!(
            LoadError::Engine(engine::EngineError::Link(
                "failed to map: Cannot allocate memory (os error 12)".into()
            ))
            .is_transient()
        );
        assert!(
            LoadError::Plugins("open: Too many open files (os error 24)".into()).is_transient()
        );
        assert!(!LoadError::Plugins("holds no such plugin".into()).is_transient());
    }
}
