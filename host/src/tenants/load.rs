//! Loading one project from its build cache into a servable [`App`]: the same steps for
//! `filerouter run --project` and for each tenant of `run --tenants`.
//!
//! Read and verify the cache (checksum, key), write its native code once to a file and map it
//! (`Component::deserialize_file`) once its bytes hash as the cache records, link the guest, and rebuild the route table from the cache's
//! metadata. Blocking: call it from `spawn_blocking`. It reads no route source and runs no
//! project code.

use std::{path::Path, time::SystemTime};

use crate::{
    app::{App, Loaded, Mode},
    cache::{self, CacheKey},
    config::Settings,
    data::Data,
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
    /// The native code did not fit this machine and was compiled again.
    pub recompiled: bool,
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
}

/// Load the project at `root` from the cache in `dir`: [`open`], then [`serve_from`].
pub fn load(
    engine: &SandboxEngine,
    root: &Path,
    dir: &Path,
    key: Option<&CacheKey>,
    limits: impl FnOnce(&Settings) -> Limits,
    data: Data,
    queue: Queue,
) -> Result<LoadedProject, LoadError> {
    let (opened, stamp) = open(dir, key)?;
    serve_from(engine, root, &opened, stamp, limits, data, queue)
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
/// database and kv store;
/// its requests wait for their turn in `queue`.
pub fn serve_from(
    engine: &SandboxEngine,
    root: &Path,
    opened: &cache::Opened,
    stamp: Option<CacheStamp>,
    limits: impl FnOnce(&Settings) -> Limits,
    data: Data,
    queue: Queue,
) -> Result<LoadedProject, LoadError> {
    // The native code's file is checked against the hash the verified cache records, on every
    // load, before it is mapped.
    let (guest, recompiled) = engine.baked_guest_cached(
        &opened.native_id(),
        &opened.native_hash()?,
        || opened.native().map_err(|e| e.to_string()),
        || opened.component(),
    )?;
    let settings = opened.metadata.settings.clone();
    let sealed = crate::plugins::sealed::decode(&opened.plugins).map_err(LoadError::Plugins)?;
    let plugins = crate::plugins::Plugins::from_sealed(root, &settings.plugins, &sealed)
        .map_err(|e| LoadError::Plugins(e.to_string()))?;
    let sandbox =
        Sandbox::with_data(guest, None, limits(&settings), data, queue)?.with_plugins(plugins)?;
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
        recompiled,
        stamp,
    })
}
