//! `filerouter dev`: serve a project with hot reload and detailed error pages.
//!
//! Startup follows SPEC.md: load `config.py`, scan `routes/` and map files to URLs, start the
//! server with hot reload.

use anyhow::{Context, bail};

use super::ServeArgs;
use crate::{
    app::{App, Loaded},
    data::Data,
    imported::Imported,
    logging,
    mode::Mode,
    project::{DependencyOverrides, Project},
    reload,
    sandbox::{Limits, Sandbox, engine::SandboxEngine},
    scheduler::{self, Scheduler},
    server,
    site::Site,
};

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // A broken operator CA file stops the start, not every HTTPS call later.
    crate::outbound::check_ca_file().map_err(|e| anyhow::anyhow!("outbound HTTPS: {e}"))?;
    super::serve_until_stopped(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    let routes_dir = Project::routes_dir(&root);
    if !routes_dir.is_dir() {
        bail!(
            "{} has no routes/ folder: is it a filerouter project? (`filerouter init NAME` creates one)",
            root.display()
        );
    }
    // config.py first (in a small sandbox): it sizes the real one.
    let scheduler = Scheduler::new(scheduler::default_workers());
    let boot_engine = tokio::task::spawn_blocking(|| SandboxEngine::load(1))
        .await
        .context("engine setup panicked")??;
    let boot = Sandbox::new(boot_engine, None, Limits::default(), scheduler.tooling())?;
    let settings = boot.load_settings(&root).await?;
    drop(boot);
    logging::init(Mode::Development, settings.logging.level.as_deref());
    let workers = settings
        .server
        .workers
        .map_or_else(scheduler::default_workers, |w| w as usize);
    scheduler.set_workers(workers);
    let engine = tokio::task::spawn_blocking(move || SandboxEngine::load(workers as u32))
        .await
        .context("engine setup panicked")??;
    scheduler.set_preemption(engine.engine().preemption());
    let queue = scheduler.queue("project", settings.server.queue_config(workers));
    let data_dir = crate::data::dir(&root, args.data_dir.as_deref());
    let bounds = (crate::kv::Bounds::default(), settings.db_bounds());
    let servers = args.servers.resolve(&root);
    let data = tokio::task::spawn_blocking(move || {
        Data::open_with(&data_dir, bounds.0, bounds.1, &servers)
    })
    .await
    .context("opening the data folder panicked")??;
    let sandbox = Sandbox::with_data(engine, Some(&routes_dir), settings.limits(), data, queue)?;
    let plugins = crate::plugins::load_in_background(&root, &settings.plugins).await?;
    let sandbox = sandbox.with_plugins(plugins.clone());
    let environment = settings.project_environment(&root).await?;
    if let Some(missing) = environment.missing_message(false) {
        tracing::warn!("{missing} (reading it raises KeyError until then)");
    }
    let sandbox = sandbox.with_environment(environment.environment);
    let gate = settings
        .outbound
        .gate(None, Default::default())
        .map_err(|e| anyhow::anyhow!("config.py: outbound: {e}"))?;
    let sandbox = sandbox.with_outbound(gate);
    // `--record` (or config.py's `record`): every request taped, the traces of 5xx and 499
    // answers kept in the data folder's traces/, replayed on the source (there is no build).
    // The recorder goes with the sandbox through every reload; config.py's `record` is read
    // at start.
    let sandbox = if args.record || settings.record.enabled == Some(true) {
        let settings = crate::replay::RecordSettings::from_project(&settings.record);
        let dir = crate::data::dir(&root, args.data_dir.as_deref()).join("traces");
        let store = crate::replay::store::TraceStore::new(
            dir.clone(),
            settings.max_traces,
            settings.max_bytes,
        );
        tracing::info!(
            "recording requests: traces of 5xx and 499 answers kept in {}",
            dir.display()
        );
        sandbox.with_recorder(Some(std::sync::Arc::new(crate::replay::Recorder::new(
            settings,
            crate::replay::recording::DEV_BUNDLE.to_string(),
            None,
            std::sync::Arc::new(store),
        ))))
    } else {
        sandbox
    };
    let overrides = match &args.overrides {
        Some(file) => Some(
            DependencyOverrides::new(&root, file)
                .with_context(|| format!("--overrides: cannot read {}", file.display()))?,
        ),
        None => None,
    };
    // The migrations (the SQL ones, then the Alembic history), in instances of the built-in
    // guest, which see the project's files.
    let migration_error = reload::migrate(&root, &sandbox).await;
    // The packages imported once, before the routes are inspected in instances made from them.
    let imported = Imported::new(&root, &sandbox);
    let sandbox = imported.packages_layer(&sandbox).await;
    let project = Project::load(&root, &sandbox, None, overrides.as_ref()).await;
    // The start-up hook (startup.py), after the migrations: at start and after every reload.
    let config_error = match migration_error {
        Some(failure) => Some(failure),
        None => crate::startup::failure(&sandbox, &project.root_files).await,
    };
    for error in &project.scan_errors {
        tracing::error!("{error}");
    }
    for route in &project.routes {
        if let Err(error) = &route.handlers {
            tracing::error!(
                "routes/{}: {}: {} (line {})",
                route.file,
                error.kind,
                error.message,
                error.line.unwrap_or(0)
            );
        }
    }

    let listener = super::listen(&settings.server, args.host, args.port).await?;
    let address = listener.local_addr().context("no local address")?;
    print_routes(&project);
    for plugin in plugins.iter() {
        println!("  {:<24} {:<28} {}", "plugin", plugin.name, plugin.file);
    }
    let failing = project
        .routes
        .iter()
        .filter(|route| route.handlers.is_err())
        .count();
    let mut app = App::new(
        root,
        Mode::Development,
        Loaded::new(project, sandbox, settings, config_error),
    );
    if let Some(overrides) = overrides {
        tracing::warn!("dependencies are overridden by {overrides} (dev --overrides: tests only)");
        app.overrides = Some(overrides);
    }
    // The routes imported once too, in the background: until then requests import them.
    imported.refresh(&app);
    let _watcher =
        reload::watch(app.clone(), imported).context("cannot watch the project folder")?;
    // The counts /docs shows: routes as get_routes() lists them, handlers per path and method.
    let statistics = app.current().catalog.statistics.clone();
    let websockets = match app.current().catalog.websockets.len() {
        0 => String::new(),
        1 => ", 1 WebSocket".to_string(),
        n => format!(", {n} WebSockets"),
    };
    let failing = match failing {
        0 => String::new(),
        1 => "; 1 more fails to import".to_string(),
        n => format!("; {n} more fail to import"),
    };
    println!(
        "filerouter dev: serving {} routes ({} handlers{websockets}{failing}) at http://{address} (mode: {}, hot reload: on)",
        statistics.total_paths,
        statistics.total_routes,
        Mode::Development.name()
    );
    let serving = server::Serving {
        graceful_timeout: std::time::Duration::from_secs(5),
        ..Default::default()
    };
    serving.health.loaded();
    server::serve(listener, Site::Project(app), serving).await;
    Ok(())
}

/// The route table, as a developer wants to see it at startup.
fn print_routes(project: &Project) {
    for route in &project.routes {
        let methods = match &route.handlers {
            Ok(handlers) => handlers
                .iter()
                .map(|h| h.method.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            Err(_) => "(fails to import)".to_string(),
        };
        println!(
            "  {:<24} {:<28} routes/{}",
            methods,
            route.pattern.to_string(),
            route.file
        );
    }
    for name in project.root_files.names() {
        let role = match name.as_str() {
            "middleware.py" => "around every request",
            "docs.py" => "/docs",
            "startup.py" => "at start and every reload",
            _ => "404 pages",
        };
        println!("  {:<24} {:<28} {name}", "", role);
    }
}
