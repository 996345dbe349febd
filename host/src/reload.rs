//! Hot reload for `filerouter dev`: watch the project folder and rebuild the project on change.
//!
//! File events are debounced briefly, then the project is rescanned; only route files whose
//! size or modification time changed are inspected again. An edit of `config.py` is evaluated
//! again; a broken one keeps the last good settings and reports the error.
//!
//! The watcher never follows symbolic links: a link under `public/` or `routes/_lib/` to `/`
//! or `/usr` adds no watches (it would add one per folder of the whole tree, and fail on
//! folders the server may not read).

use std::{path::Path, time::Duration};

use notify::{Config, Event, RecommendedWatcher, RecursiveMode, Watcher};

use crate::{
    app::{App, Loaded},
    config::Settings,
    error_page::Failure,
    project::Project,
};

/// How long to wait for more events before reloading.
const DEBOUNCE: Duration = Duration::from_millis(40);

/// Start watching `app.root`. Keep the returned watcher alive for as long as reloads should happen.
pub fn watch(app: App) -> notify::Result<RecommendedWatcher> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
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
                let config = relevant
                    .iter()
                    .any(|p| p.file_name().is_some_and(|n| n == "config.py"));
                let _ = tx.send(config);
            }
        }
    };
    let mut watcher =
        RecommendedWatcher::new(handler, Config::default().with_follow_symlinks(false))?;
    watcher.watch(&app.root, RecursiveMode::Recursive)?;
    tokio::spawn(async move {
        while let Some(mut config_changed) = rx.recv().await {
            while let Ok(Some(more)) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                config_changed |= more;
            }
            reload(&app, config_changed).await;
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
        Some(name) => name.ends_with(".py"),
        None => false,
    }
}

async fn reload(app: &App, config_changed: bool) {
    let current = app.current();
    let mut sandbox = current.sandbox.clone();
    let mut settings = current.settings.clone();
    let mut config_error = current.config_error.clone();
    if config_changed {
        match Settings::load(&sandbox, &app.root).await {
            Ok(loaded) => {
                let limits = loaded.limits();
                if &limits != sandbox.limits() {
                    match sandbox.with_limits(limits) {
                        Ok(updated) => sandbox = updated,
                        Err(e) => tracing::error!("config.py: {e}"),
                    }
                }
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
    let project = Project::load(&app.root, &sandbox, Some(&current.project)).await;
    report(&current.project, &project);
    app.replace(Loaded::new(project, sandbox, settings, config_error));
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
