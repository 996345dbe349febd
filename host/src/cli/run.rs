//! `filerouter run`: serve a project from its build cache, in production mode.
//!
//! Never scans `routes/` or reads route source: the routes, settings, the baked guest and the
//! plugins (never `plugins/`) all come from the cache, which is verified (checksum, and the key if encrypted) before anything
//! is served. Errors answer `{"detail":"Internal Server Error"}`; details go to the log.

use std::time::{Duration, Instant};

use anyhow::Context;

use super::RunArgs;
use crate::{
    app::{App, Loaded, Mode},
    cache::{self, CacheKey},
    logging,
    project::Project,
    sandbox::{Sandbox, engine::SandboxEngine},
    scheduler::{self, Scheduler},
    server,
};

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    // Before the runtime starts: finding the cache may evaluate config.py, on a runtime of its own.
    let dir = super::cache_dir(&root, args.cache_dir.as_deref())?;
    super::runtime()?.block_on(serve(args, root, dir))
}

async fn serve(
    args: RunArgs,
    root: std::path::PathBuf,
    dir: std::path::PathBuf,
) -> anyhow::Result<()> {
    let key = CacheKey::from_env()?;
    let opened = tokio::task::spawn_blocking(move || cache::open(&dir, key.as_ref()))
        .await
        .context("reading the cache panicked")??;
    let settings = opened.metadata.settings.clone();
    logging::init(
        Mode::Production,
        settings.logging.production_level.as_deref(),
    );

    let workers = args
        .workers
        .or(settings.server.workers)
        .unwrap_or(scheduler::default_workers() as u32)
        .max(1);
    let started = Instant::now();
    let opened = std::sync::Arc::new(opened);
    let for_engine = opened.clone();
    let (engine, recompiled) = tokio::task::spawn_blocking(move || {
        SandboxEngine::load_baked(workers, &for_engine.native, || for_engine.component())
    })
    .await
    .context("engine setup panicked")??;
    if recompiled {
        eprintln!(
            "filerouter: the cache's native code does not fit this machine; recompiled it from the baked component ({:.1}s)",
            started.elapsed().as_secs_f64()
        );
    }
    let sealed = crate::plugins::sealed::decode(&opened.plugins)
        .map_err(|e| anyhow::anyhow!("the build cache: {e}"))?;
    let declared = settings.plugins.clone();
    let plugin_root = root.clone();
    let plugins = tokio::task::spawn_blocking(move || {
        crate::plugins::Plugins::from_sealed(&plugin_root, &declared, &sealed)
    })
    .await
    .context("loading the plugins panicked")??;
    let scheduler = Scheduler::new(workers as usize);
    let queue = scheduler.queue("project", settings.server.queue_config(workers as usize));
    let sandbox = Sandbox::new(engine, None, settings.limits(), queue)?.with_plugins(plugins)?;
    let project = Project::from_cache(&opened.metadata.routes, &opened.metadata.root_files);
    let routes = project.routes.len();

    let listener = super::listen(&settings.server, args.host, args.port).await?;
    let address = listener.local_addr().context("no local address")?;
    let drain = settings.limits().wall.min(Duration::from_secs(30)) + Duration::from_secs(1);
    let app = App::new(
        root,
        Mode::Production,
        Loaded::new(project, sandbox, settings, None),
    );
    println!(
        "filerouter run: serving {routes} routes at http://{address} (mode: {}, workers: {workers}, build of {})",
        Mode::Production.name(),
        opened.manifest.created_at
    );
    server::serve(listener, app, drain).await;
    println!("filerouter run: stopped");
    Ok(())
}
