//! `dev`'s imported project: the project's packages and routes kept imported in live snapshots
//! (`crate::sandbox::live_snapshot`), so that a request pays no import, as in `run`, and
//! remade when what they hold changes.
//!
//! Two layers. The packages (`.packages/`) alone: taken when `dev` starts, before the routes
//! are inspected (an inspection then imports the route, not SQLAlchemy), and again when
//! `.packages/` changes. The project (every route file that imports, the helpers under
//! `routes/`, the root files) on top of it: taken in the background after every load and
//! reload, and swapped in if the project is still the one it was taken of. An edit shows at
//! once all the same: a reload serves from the packages' snapshot, importing the routes
//! from source, until the project's is ready (the time of one import of the routes).
//!
//! A project whose snapshot cannot be taken (a route that reads a secret at import time, as
//! `build` refuses too) is served from source, with one line in the log saying why; so is a
//! route file that fails to import, which shows its error page as before.
//!
//! Not here: taking a snapshot (`sandbox::live_snapshot`), watching files (`crate::reload`).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Instant, SystemTime},
};

use crate::{
    app::{App, Loaded},
    packages,
    sandbox::{
        Sandbox, artifacts,
        image::{self, Image},
        snapshot::Sources,
    },
};

/// The layers `dev` serves from, and the snapshot of the project being taken.
pub struct Imported {
    root: PathBuf,
    /// The built-in guest's image: what a project without packages starts from.
    builtin: Arc<Image>,
    /// The packages' snapshot and what `.packages/` looked like when it was taken.
    packages: tokio::sync::Mutex<Option<PackagesLayer>>,
    /// The project's snapshot being taken, if any: a newer one stops it.
    taking: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

struct PackagesLayer {
    stamp: u64,
    /// `None`: there are no packages, or their snapshot failed; calls start from `builtin`.
    image: Option<Arc<Image>>,
}

impl Imported {
    /// For the project at `root`, served by `sandbox` (the built-in guest's).
    pub fn new(root: &Path, sandbox: &Sandbox) -> Arc<Imported> {
        Arc::new(Imported {
            root: root.to_path_buf(),
            builtin: sandbox.image().clone(),
            packages: tokio::sync::Mutex::new(None),
            taking: Mutex::new(None),
        })
    }

    /// `sandbox` starting from the packages' snapshot: taken now if `.packages/` changed since
    /// the last one (or there was none); the built-in guest if there are no packages or they
    /// do not import (the routes that import them show why).
    pub async fn packages_layer(&self, sandbox: &Sandbox) -> Sandbox {
        let mut layer = self.packages.lock().await;
        let root = self.root.clone();
        let stamp = tokio::task::spawn_blocking(move || packages_stamp(&root))
            .await
            .unwrap_or_default();
        let image = match layer.as_ref().filter(|l| l.stamp == stamp) {
            Some(current) => current.image.clone(),
            None => {
                let image = self
                    .packages_snapshot(sandbox, stamp)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!("the packages are imported by every request: {e}");
                        None
                    });
                *layer = Some(PackagesLayer {
                    stamp,
                    image: image.clone(),
                });
                image
            }
        };
        sandbox.with_image(image.unwrap_or_else(|| self.builtin.clone()))
    }

    /// `sandbox` with its instances made from the built-in guest, which sees the project's
    /// files (the snapshots' instances see none): where `dev` runs the Alembic history.
    pub fn builtin_layer(&self, sandbox: &Sandbox) -> Sandbox {
        sandbox.with_image(self.builtin.clone())
    }

    /// The snapshot of the packages `.packages/` holds now (whose files look as `stamp` says):
    /// the one an earlier start kept, or a new one; `None` when there are no packages.
    async fn packages_snapshot(
        &self,
        sandbox: &Sandbox,
        stamp: u64,
    ) -> Result<Option<Arc<Image>>, String> {
        if stamp == 0 {
            return Ok(None);
        }
        if let Some(image) = kept_packages_image(stamp).await {
            tracing::info!("packages imported once for every request (kept from an earlier start)");
            return Ok(Some(image));
        }
        let root = self.root.clone();
        let files = tokio::task::spawn_blocking(move || packages::files_and_bytecode(&root))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        if files.is_empty() {
            return Ok(None);
        }
        let started = Instant::now();
        let count = files.len();
        let sources = Sources {
            packages: files,
            keep_compiled: true,
            ..Sources::default()
        };
        let image = sandbox
            .with_image(self.builtin.clone())
            .live_snapshot(sources)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            "packages imported once for every request: {count} files of .packages/ in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        keep_packages_image(stamp, image.clone()).await;
        Ok(Some(image))
    }

    /// Take the snapshot of the project `app` serves now, in the background, and serve from
    /// it once it is ready, unless the project was reloaded meanwhile. A snapshot still being
    /// taken of an earlier version is stopped.
    pub fn refresh(self: &Arc<Self>, app: &App) {
        let loaded = app.current();
        let this = self.clone();
        let app = app.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            match this.project_layer(&loaded).await {
                Ok(Some(sandbox)) => {
                    let upgraded = app.upgrade(&loaded, sandbox.clone());
                    // The snapshot it replaced goes once no request uses it: idle slots must
                    // not keep it mapped.
                    drop(loaded);
                    sandbox.forget_unused_images();
                    if upgraded {
                        tracing::info!(
                            "routes imported once for every request ({:.2} s)",
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
                Ok(None) => {
                    tracing::info!("routes imported once for every request: none to import")
                }
                Err(e) => tracing::warn!("every request imports the routes from source: {e}"),
            }
        });
        if let Ok(mut taking) = self.taking.lock()
            && let Some(earlier) = taking.replace(task)
        {
            earlier.abort();
        }
    }

    /// The sandbox of `loaded` starting from a snapshot of its project; `None` when there is
    /// nothing to import.
    async fn project_layer(&self, loaded: &Loaded) -> Result<Option<Sandbox>, String> {
        let routes: Vec<String> = loaded
            .project
            .routes
            .iter()
            .filter(|route| route.handlers.is_ok())
            .map(|route| route.file.clone())
            .collect();
        let root_files = loaded.project.root_files.to_bake();
        if routes.is_empty() && root_files.is_empty() {
            return Ok(None);
        }
        let sources = Sources {
            files: loaded.project.root_files.route_sources(),
            routes,
            root_files,
            packages: Vec::new(),
            keep_compiled: false,
        };
        let image = loaded
            .sandbox
            .live_snapshot(sources)
            .await
            .map_err(|e| match e {
                crate::sandbox::SandboxError::Project(error) => format!(
                    "{}{}: {}",
                    error.kind,
                    error.at(),
                    error.message.lines().next().unwrap_or_default()
                ),
                other => other.to_string(),
            })?;
        Ok(Some(loaded.sandbox.with_image(image)))
    }
}

/// Where the packages' snapshot for `stamp` is named, so that the next `dev` of an unchanged
/// `.packages/` (a test session's, say) maps it instead of taking it again: a file in the
/// cache folder holding the image's hash, keyed by the stamp and the guest.
fn packages_key_file(stamp: u64) -> PathBuf {
    let key = blake3::hash(format!("{}:{stamp:016x}", crate::sandbox::GUEST_SHA256).as_bytes());
    artifacts::cache_dir()
        .join("dev-packages")
        .join(&key.to_hex()[..32])
}

/// The packages' snapshot an earlier `dev` kept for `stamp`, if its image is still there and
/// passes its checks (`Image::load` verifies the hash).
async fn kept_packages_image(stamp: u64) -> Option<Arc<Image>> {
    tokio::task::spawn_blocking(move || {
        let text = std::fs::read_to_string(packages_key_file(stamp)).ok()?;
        let hash = blake3::Hash::from_hex(text.trim()).ok()?;
        let image = Image::load(&image::images_dir(), &hash, || {
            Err("the kept snapshot is gone".into())
        })
        .ok()?;
        Some(image)
    })
    .await
    .ok()
    .flatten()
}

/// Keep the packages' snapshot for the next `dev` (best effort: a failure only costs the
/// next start the time of taking it).
async fn keep_packages_image(stamp: u64, image: Arc<Image>) {
    let _ = tokio::task::spawn_blocking(move || {
        image::keep(image.bytes());
        let path = packages_key_file(stamp);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) =
            artifacts::store_atomically_unsynced(&path, image.hash().to_hex().as_bytes())
        {
            tracing::debug!("could not keep the packages' snapshot: {e}");
        }
    })
    .await;
}

/// What `.packages/` looks like: a hash of every file's path, size and modification time (0
/// when there is none). Blocking.
fn packages_stamp(root: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut stack = vec![root.join(packages::DIR)];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
                continue;
            }
            seen += 1;
            entry.path().hash(&mut hasher);
            meta.len().hash(&mut hasher);
            meta.modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .hash(&mut hasher);
        }
    }
    if seen == 0 { 0 } else { hasher.finish() }
}
