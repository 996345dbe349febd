//! Hot reload for `filerouter dev`: watch the project folder and rebuild the project on change.
//!
//! File events are debounced briefly, then the project is rescanned; only route files whose
//! size or modification time changed, or that of a project file their import loaded (a helper
//! under `routes/_lib/`), and route files that failed, are inspected again (`crate::project`). An edit of `config.py` is evaluated
//! again; a broken one keeps the last good settings and reports the error. A changed plugin
//! (a `.wasm` or `.wit` file, or its entry in `config.py`) is loaded and checked again; a
//! broken one keeps the last good plugins and shows the error on every request until fixed.
//! A new or changed file in `migrations/` is applied, and so is the Alembic history (`alembic/`,
//! `alembic.ini`: `alembic upgrade heads`) when a file of it changes; a broken one leaves the
//! database as it was and shows its file and line on every request until fixed. An edit of the env file (or
//! of `config.py`) reads the settings and secrets for route code again (`crate::environment`);
//! a broken env file keeps the last good values and shows its line on every request.
//!
//! The watcher never follows symbolic links: a link under `public/` or `routes/_lib/` to `/`
//! or `/usr` adds no watches (it would add one per folder of the whole tree, and fail on
//! folders the server may not read).

use std::{path::Path, sync::Arc, time::Duration};

use notify::{Config, Event, RecommendedWatcher, RecursiveMode, Watcher};

use crate::{
    app::{App, Loaded},
    error_page::Failure,
    imported::Imported,
    project::Project,
    sandbox::Sandbox,
};

/// The kind of the failure every request shows while the env file does not read.
const ENVIRONMENT_ERROR: &str = "EnvironmentError";

/// The kind of the failure every request shows while a plugin does not load.
const PLUGIN_ERROR: &str = "PluginError";

/// The kind of the failure every request shows while a migration does not apply.
pub const MIGRATION_ERROR: &str = "MigrationError";

/// What a batch of file events touched.
#[derive(Debug, Clone, Copy, Default)]
struct Changed {
    config: bool,
    plugins: bool,
    migrations: bool,
}

/// How long to wait for more events before reloading.
const DEBOUNCE: Duration = Duration::from_millis(40);

/// Start watching `app.root`. Keep the returned watcher alive for as long as reloads should happen.
pub fn watch(app: App, imported: Arc<Imported>) -> notify::Result<RecommendedWatcher> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Changed>();
    let root = app.root.clone();
    let handler = move |event: notify::Result<Event>| {
        if let Ok(event) = event
            && !event.kind.is_access()
        {
            let relevant: Vec<&Path> = event
                .paths
                .iter()
                .filter(|p| is_relevant(&root, p))
                .map(|p| p.as_path())
                .collect();
            if !relevant.is_empty() {
                let changed = Changed {
                    config: relevant.iter().any(|p| {
                        p.file_name()
                            .is_some_and(|n| n == "config.py" || is_env_file(&n.to_string_lossy()))
                    }),
                    plugins: relevant.iter().any(|p| is_plugin_file(p)),
                    migrations: relevant
                        .iter()
                        .any(|p| is_migration(&root, p) || is_history(&root, p)),
                };
                let _ = tx.send(changed);
            }
        }
    };
    let mut watcher =
        RecommendedWatcher::new(handler, Config::default().with_follow_symlinks(false))?;
    watcher.watch(&app.root, RecursiveMode::Recursive)?;
    tokio::spawn(async move {
        // Whether the last plugin load failed: then every reload tries again.
        let mut plugins_broken = false;
        while let Some(mut changed) = rx.recv().await {
            while let Ok(Some(more)) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                changed.config |= more.config;
                changed.plugins |= more.plugins;
                changed.migrations |= more.migrations;
            }
            changed.plugins |= plugins_broken;
            plugins_broken = reload(&app, &imported, changed).await;
        }
    });
    Ok(watcher)
}

/// Whether a changed path can affect what is served.
fn is_relevant(root: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    let mut components = rel.components().map(|c| c.as_os_str().to_string_lossy());
    match components.next().as_deref() {
        Some("routes") => !rel.components().any(|c| c.as_os_str() == "__pycache__"),
        Some(".cache") | Some("typings") | Some(crate::data::DEFAULT_DIR) => false,
        // `filerouter packages install` swaps the folder in whole: its packages' snapshot is
        // taken again.
        Some(crate::packages::DIR) => true,
        Some(crate::db::migrations::FOLDER) => is_migration(root, path),
        Some(crate::alembic::FOLDER) => is_alembic(path),
        Some(crate::alembic::INI) => true,
        Some(name) => name.ends_with(".py") || is_env_file(name) || is_plugin_file(path),
        None => false,
    }
}

/// Whether a file at the project's top may be an env file: `.env`, `.env.local`, ... (the
/// one `config.py` names is checked when the settings are read again).
fn is_env_file(name: &str) -> bool {
    name == crate::environment::DEFAULT_FILE || name.starts_with(".env.") || name.ends_with(".env")
}

/// Whether `path` is a file of the Alembic history (or its `alembic.ini`).
fn is_history(root: &Path, path: &Path) -> bool {
    (path.starts_with(root.join(crate::alembic::FOLDER)) && is_alembic(path))
        || path == root.join(crate::alembic::INI)
}

/// Whether `path` may be part of the Alembic history: not a compiled file.
fn is_alembic(path: &Path) -> bool {
    !path.components().any(|c| c.as_os_str() == "__pycache__")
        && path.extension().is_none_or(|e| e != "pyc")
}

/// Whether `path` is a migration file.
fn is_migration(root: &Path, path: &Path) -> bool {
    path.parent() == Some(&root.join(crate::db::migrations::FOLDER))
        && path.extension().is_some_and(|e| e == "sql")
}

/// Apply the project's pending SQL migrations, then its Alembic history (`alembic upgrade
/// heads`, in an instance of `sandbox`, which must start from the built-in guest with the
/// project's files: see [`crate::alembic`]); the failure every request shows while one does
/// not apply (the database keeps its last good state), or `None`.
pub async fn migrate(root: &Path, sandbox: &Sandbox) -> Option<Failure> {
    let fix = "Fix the migration: the database keeps its last good state meanwhile, and the server applies the fix by itself";
    match crate::db::migrations::apply_folder(root, &sandbox.data().db).await {
        Ok(applied) => {
            for name in applied {
                tracing::info!("migration {name} applied");
            }
        }
        Err(e) => {
            tracing::error!("{e}");
            return Some(Failure::simple(
                hyper::StatusCode::INTERNAL_SERVER_ERROR,
                MIGRATION_ERROR,
                &e.to_string(),
                vec![fix.into()],
            ));
        }
    }
    let upgraded = match crate::alembic::read(root).await {
        Ok(Some(history)) => crate::alembic::upgrade(sandbox, &history).await,
        Ok(None) => return None,
        Err(e) => Err(e),
    };
    match upgraded {
        Ok(outcome) => {
            for line in outcome.output.lines().filter(|l| l.contains("Running ")) {
                tracing::info!("alembic: {line}");
            }
            None
        }
        Err(crate::alembic::AlembicError::Raised(error)) => {
            let mut failure = Failure::from_project(&error);
            failure.message = format!("alembic upgrade: {}: {}", error.kind, error.message);
            failure.kind = MIGRATION_ERROR.into();
            failure.suggestions.push(fix.into());
            let at = match (&failure.file, failure.line) {
                (Some(file), Some(line)) => format!("{file}:{line}"),
                (Some(file), None) => file.clone(),
                _ => crate::alembic::FOLDER.into(),
            };
            tracing::error!("{at}: {}", failure.message);
            Some(failure)
        }
        Err(e) => {
            tracing::error!("{e}");
            let mut failure = Failure::simple(
                hyper::StatusCode::INTERNAL_SERVER_ERROR,
                MIGRATION_ERROR,
                &e.to_string(),
                vec![fix.into()],
            );
            // A file of the history that cannot be read (a link out, a FIFO, a giant): named
            // for the page's editor link, relative to the project as route files are.
            if let crate::alembic::AlembicError::Read(error) = &e {
                failure.file = error
                    .path()
                    .strip_prefix(root)
                    .ok()
                    .map(|p| p.to_string_lossy().into_owned());
            }
            Some(failure)
        }
    }
}

/// Whether `path` may be part of a plugin: a component or a WIT file.
fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm" || e == "wit")
}

/// Reload what `changed` touched; returns whether the plugins failed to load.
async fn reload(app: &App, imported: &Arc<Imported>, changed: Changed) -> bool {
    let config_changed = changed.config;
    let current = app.current();
    let mut sandbox = current.sandbox.clone();
    let mut settings = current.settings.clone();
    let mut config_error = current.config_error.clone();
    if config_changed {
        match sandbox.load_settings(&app.root).await {
            Ok(loaded) => {
                let limits = loaded.limits();
                if &limits != sandbox.limits() {
                    sandbox = sandbox.with_limits(limits);
                }
                if loaded.outbound != settings.outbound {
                    let metrics = sandbox.outbound().metrics().clone();
                    match loaded.outbound.gate(None, metrics) {
                        Ok(gate) => sandbox = sandbox.with_outbound(gate),
                        Err(e) => tracing::error!("config.py: outbound: {e}"),
                    }
                }
                let workers = sandbox.queue().scheduler().workers();
                sandbox
                    .queue()
                    .reconfigure(loaded.server.queue_config(workers));
                tracing::info!("config.py reloaded");
                settings = loaded;
                config_error = None;
            }
            Err(e) => {
                tracing::error!("{e} (keeping the last good settings)");
                config_error = Some(Failure::from_config(&e));
            }
        }
    }
    if config_changed && config_error.is_none() {
        match settings.project_environment(&app.root).await {
            Ok(gathered) => {
                if let Some(missing) = gathered.missing_message(false) {
                    tracing::warn!("{missing}");
                }
                sandbox = sandbox.with_environment(gathered.environment);
            }
            Err(e) => {
                tracing::error!("{e} (keeping the last good values)");
                config_error = Some(Failure::simple(
                    hyper::StatusCode::INTERNAL_SERVER_ERROR,
                    ENVIRONMENT_ERROR,
                    &e.to_string(),
                    vec![
                        "Fix the env file: the server keeps the last good values meanwhile and reads the fix by itself".into(),
                    ],
                ));
            }
        }
    }
    let mut plugins_broken = false;
    if changed.plugins || settings.plugins != current.settings.plugins {
        match crate::plugins::load_in_background(&app.root, &settings.plugins).await {
            Ok(plugins) => {
                tracing::info!("plugins reloaded");
                sandbox = sandbox.with_plugins(plugins);
                if config_error
                    .as_ref()
                    .is_some_and(|f| f.kind == PLUGIN_ERROR)
                {
                    config_error = None;
                }
            }
            Err(e) => {
                tracing::error!("{e} (keeping the last good plugins)");
                plugins_broken = true;
                if config_error.as_ref().is_none_or(|f| f.kind == PLUGIN_ERROR) {
                    config_error = Some(Failure::simple(
                        hyper::StatusCode::INTERNAL_SERVER_ERROR,
                        PLUGIN_ERROR,
                        &e.to_string(),
                        vec![
                            "Fix the plugin (its component, its wit/ folder or its entry in config.py): the server keeps the last good plugins meanwhile and picks up the fix by itself".into(),
                        ],
                    ));
                }
            }
        }
    }
    let migration_broken = config_error
        .as_ref()
        .is_some_and(|f| f.kind == MIGRATION_ERROR);
    if changed.migrations || migration_broken {
        match migrate(&app.root, &imported.builtin_layer(&sandbox)).await {
            Some(failure) if config_error.is_none() || migration_broken => {
                config_error = Some(failure)
            }
            Some(_) => {}
            None if migration_broken => config_error = None,
            None => {}
        }
    }
    // From the packages' snapshot (taken again if `.packages/` changed), never from the last
    // snapshot of the routes, which may hold what was just edited.
    let sandbox = imported.packages_layer(&sandbox).await;
    let project = Project::load(
        &app.root,
        &sandbox,
        Some(&current.project),
        app.overrides.as_ref(),
    )
    .await;
    report(&current.project, &project);
    // The start-up hook (startup.py) runs after every reload; while it fails, every request
    // shows why, until a reload where it succeeds (other errors shown first are kept).
    if config_error
        .as_ref()
        .is_some_and(|f| f.kind == crate::startup::STARTUP_ERROR)
    {
        config_error = None;
    }
    if config_error.is_none() {
        config_error = crate::startup::failure(&sandbox, &project.root_files).await;
    }
    app.replace(Loaded::new(project, sandbox, settings, config_error));
    imported.refresh(app);
    plugins_broken
}

/// Print scan errors and newly broken route files once, when they appear.
fn report(before: &Project, after: &Project) {
    for error in &after.scan_errors {
        if !before.scan_errors.contains(error) {
            tracing::error!("{error}");
        }
    }
    if after.scan_errors.is_empty() && !before.scan_errors.is_empty() {
        tracing::info!("route scan errors fixed");
    }
    for route in &after.routes {
        if let Err(error) = &route.handlers {
            let was = before
                .routes
                .iter()
                .find(|r| r.file == route.file)
                .map(|r| &r.handlers);
            if !matches!(was, Some(Err(old)) if old == error) {
                tracing::error!(
                    "routes/{}: {}: {} ({}:{})",
                    route.file,
                    error.kind,
                    error.message,
                    error.file.as_deref().unwrap_or("?"),
                    error.line.unwrap_or(0)
                );
            }
        }
    }
    tracing::info!("reloaded: {} routes", after.routes.len());
}
