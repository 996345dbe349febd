//! The running application: the current project, the sandbox that serves it, and the mode.
//!
//! The project is swapped atomically when `dev` reloads it; a request keeps the snapshot it
//! started with. Not here: answering requests (`crate::router` reads an [`App`]; nothing here
//! imports the router) and watching files (`crate::reload` replaces the project).

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use arc_swap::ArcSwap;

use crate::{
    catalog::{Catalog, ProjectInfo},
    config::Settings,
    error_page::Failure,
    mode::Mode,
    project::{DependencyOverrides, Project},
    sandbox::Sandbox,
};

/// What a request needs from the server: the loaded project and the sandbox to run it in.
pub struct Loaded {
    pub project: Project,
    pub sandbox: Sandbox,
    /// The settings in effect (the last good ones while `config.py` is broken).
    pub settings: Settings,
    /// A broken `config.py` (while `dev` runs): every request shows it until it is fixed.
    pub config_error: Option<Failure>,
    /// The project's API, for `/docs`, `/openapi.json`, `docs.py` and `not-found.py`.
    pub catalog: Catalog,
    /// `catalog` as the JSON a page handler's `context` reads.
    pub context: String,
}

impl Loaded {
    pub fn new(
        project: Project,
        sandbox: Sandbox,
        settings: Settings,
        config_error: Option<Failure>,
    ) -> Loaded {
        let catalog = Catalog::of(&project, ProjectInfo::from_settings(&settings));
        let context = serde_json::to_string(&catalog).unwrap_or_else(|_| "{}".into());
        Loaded {
            project,
            sandbox,
            settings,
            config_error,
            catalog,
            context,
        }
    }

    /// Whether `/docs` and `/openapi.json` are served (`docs_enabled`, default on).
    pub fn docs_enabled(&self) -> bool {
        self.settings.docs_enabled != Some(false)
    }
}

/// The application shared by every connection.
#[derive(Clone)]
pub struct App {
    pub root: PathBuf,
    pub mode: Mode,
    /// `dev --overrides FILE`: the test-only dependency overrides every reload reads again.
    pub overrides: Option<DependencyOverrides>,
    current: Arc<ArcSwap<Loaded>>,
    /// Counts reloads; the development error page polls it to reload itself.
    generation: Arc<AtomicU64>,
}

impl App {
    pub fn new(root: PathBuf, mode: Mode, loaded: Loaded) -> Self {
        Self {
            root,
            mode,
            overrides: None,
            current: Arc::new(ArcSwap::from_pointee(loaded)),
            generation: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The project and sandbox as they are now.
    pub fn current(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    /// Replace the project (hot reload).
    pub fn replace(&self, loaded: Loaded) {
        self.current.store(Arc::new(loaded));
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Serve the project of `loaded` from `sandbox` (a snapshot of it taken for `dev`, see
    /// `crate::imported`), unless a reload replaced `loaded` meanwhile: then the snapshot is
    /// stale, nothing changes, and false is returned. Not a reload: pages stay as they are.
    pub fn upgrade(&self, loaded: &Arc<Loaded>, sandbox: Sandbox) -> bool {
        let mut project = loaded.project.clone();
        project.root_files = project.root_files.without_route_sources();
        let upgraded = Arc::new(Loaded {
            project,
            sandbox,
            settings: loaded.settings.clone(),
            config_error: loaded.config_error.clone(),
            catalog: loaded.catalog.clone(),
            context: loaded.context.clone(),
        });
        let before = self.current.compare_and_swap(loaded, upgraded);
        Arc::ptr_eq(&before, loaded)
    }

    /// How many times the project was reloaded.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}
