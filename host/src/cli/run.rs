//! `filerouter run`: serve a project from its build cache, in production mode; or, with
//! `--tenants FILE`, many projects (tenants) chosen by the request's host.
//!
//! Never scans `routes/` or reads route source: the routes, settings, the baked guest and the
//! plugins (never `plugins/`) all come from the cache, which is verified (checksum, and the key
//! if encrypted) before anything is served. The one thing read besides: the values of the
//! names `config.py` declares in `environment` (`crate::environment`), which no cache holds.
//! Errors answer `{"detail":"Internal Server Error"}`;
//! details go to the log. One project is the one-tenant case: the same loading
//! ([`tenants::load`]) and the same engine set-up; it is loaded at start, and a bad cache stops
//! `run`. The project's data is in its data folder unless `--database-url` (Postgres) and
//! `--kv-url` (Redis) name servers that several `run` processes share; tenants name theirs in
//! the tenants file.

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;

use super::RunArgs;
use crate::{
    admin,
    cache::CacheKey,
    config::ServerSettings,
    data::Data,
    db,
    health::Health,
    logging,
    mode::Mode,
    replay::{Recorder, store::TraceStore},
    sandbox::engine::{EngineError, SandboxEngine},
    scheduler::{self, Scheduler},
    server,
    site::Site,
    tenants::{self, Tenants, config::TenantsConfig},
};

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    // A broken operator CA file stops the start, not every HTTPS call later.
    crate::outbound::check_ca_file().map_err(|e| anyhow::anyhow!("outbound HTTPS: {e}"))?;
    if let Some(file) = args.tenants.clone() {
        return super::serve_until_stopped(serve_tenants(args, file));
    }
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    // Before the runtime starts: finding the cache may evaluate config.py, on a runtime of its own.
    let dir = super::cache_dir(&root, args.cache_dir.as_deref())?;
    super::serve_until_stopped(serve(args, root, dir))
}

async fn serve(args: RunArgs, root: PathBuf, dir: PathBuf) -> anyhow::Result<()> {
    let key = CacheKey::from_env()?;
    let (opened, stamp) =
        tokio::task::spawn_blocking(move || tenants::load::open(&dir, key.as_ref()))
            .await
            .context("reading the cache panicked")??;
    let settings = opened.metadata.settings.clone();
    logging::init_with(
        Mode::Production,
        settings.logging.production_level.as_deref(),
        args.log_format,
        !args.no_access_log,
    );
    // `--record` (or config.py's `record`): the kept traces go to the data folder's traces/,
    // listed on the admin address.
    let recording = args.record_settings(&settings.record).map(|settings| {
        let dir = crate::data::dir(&root, args.data_dir.as_deref()).join("traces");
        let store = Arc::new(TraceStore::new(
            dir,
            settings.max_traces,
            settings.max_bytes,
        ));
        (settings, store)
    });
    let bundle = opened.bundle_blake3.clone();
    // The admin address answers from now on: /readyz is 503 until the project is loaded.
    let health = Health::default();
    let traces = recording.as_ref().map(|(_, store)| store.clone());
    let admin_address = start_admin(&args, &health, None, traces).await?;

    let data = open_data(
        &args,
        &root,
        &settings,
        &opened.metadata.migrations,
        opened.metadata.alembic_heads.as_deref(),
    )
    .await?;
    let probe = data.clone();
    health.check_backends(move || {
        let data = probe.clone();
        async move { data.answers(crate::health::BACKEND_TIMEOUT).await }
    });
    // The settings and secrets for route code, read now: the cache holds none.
    let gathered = settings.project_environment(&root).await?;
    if let Some(missing) = gathered.missing_message(false) {
        anyhow::bail!("{missing}");
    }
    let environment = gathered.environment;

    let workers = args
        .workers
        .or(settings.server.workers)
        .unwrap_or(scheduler::default_workers() as u32)
        .max(1);
    let scheduler = Scheduler::new(workers as usize);
    let queue = scheduler.queue("project", settings.server.queue_config(workers as usize));
    let preempted = scheduler.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let engine = SandboxEngine::new(workers)?;
        preempted.set_preemption(engine.preemption());
        tenants::load::serve_from(
            &engine,
            &root,
            &opened,
            stamp,
            |settings| settings.limits(),
            |settings| settings.outbound.gate(None, Default::default()),
            data,
            queue,
            environment,
        )
        .map_err(anyhow::Error::from)
    })
    .await
    .context("engine setup panicked")??;
    if let Some((settings, store)) = recording {
        let recorder = Recorder::new(settings, bundle, None, store);
        let current = loaded.app.current();
        let recorded = current.sandbox.with_recorder(Some(Arc::new(recorder)));
        loaded.app.upgrade(&current, recorded);
        tracing::info!(
            "recording requests: traces of 5xx answers kept in the data folder's traces/"
        );
    }
    // The project's start-up hook, once, against the real data, before the first request.
    let current = loaded.app.current();
    match crate::startup::run(&current.sandbox, &current.project.root_files).await {
        Ok(true) => tracing::info!("startup.py: startup() ran"),
        Ok(false) => {}
        Err(error) => {
            let failure = crate::startup::failure_of(error);
            crate::startup::log(&failure);
            anyhow::bail!(
                "{} (the server did not start)",
                crate::startup::describe(&failure)
            );
        }
    }
    drop(current);

    let listener = super::listen(&settings.server, args.host.clone(), args.port).await?;
    let address = listener.local_addr().context("no local address")?;
    let drain = settings.limits().wall.min(Duration::from_secs(30)) + Duration::from_secs(1);
    let serving = serving(&args, health, drain);
    // The counts /docs shows: routes (one per route file), handlers (one per path and method).
    let handlers = loaded.app.current().catalog.statistics.total_routes;
    println!(
        "filerouter run: serving {} routes ({handlers} handlers) at http://{address} (mode: {}, workers: {workers}, build of {})",
        loaded.routes,
        Mode::Production.name(),
        loaded.created_at
    );
    announce_admin(admin_address);
    serving.health.loaded();
    server::serve(listener, Site::Project(loaded.app), serving).await;
    println!("filerouter run: stopped");
    Ok(())
}

/// How the server reports its health and stops: the flags, else `graceful` (the longest wall
/// limit, at most 30 s, plus 1 s) and no drain delay.
fn serving(args: &RunArgs, health: Health, graceful: Duration) -> server::Serving {
    server::Serving {
        health,
        health_path: args.health_path.clone(),
        drain_delay: args.drain_delay.unwrap_or_default(),
        graceful_timeout: args.graceful_timeout.unwrap_or(graceful),
    }
}

/// Listen on `--admin`, if given, and serve metrics and health there; the address listened on.
async fn start_admin(
    args: &RunArgs,
    health: &Health,
    tenants: Option<Tenants>,
    traces: Option<Arc<TraceStore>>,
) -> anyhow::Result<Option<std::net::SocketAddr>> {
    let Some(address) = &args.admin else {
        return Ok(None);
    };
    let listener = admin::listen(address).await?;
    let address = listener.local_addr().context("no local address")?;
    admin::spawn(
        listener,
        admin::Admin {
            health: health.clone(),
            tenants,
            traces,
        },
    );
    Ok(Some(address))
}

/// Say where the admin address listens, after the banner (which names the public port first).
fn announce_admin(address: Option<std::net::SocketAddr>) {
    if let Some(address) = address {
        println!(
            "filerouter run: admin endpoint at http://{address}/metrics and /livez, /readyz, /healthz"
        );
    }
}

/// The project's data (its `--data-dir`, or the servers the operator names), checked against
/// the build's migrations: behind them, `run` stops with a message unless `--migrate` applies
/// them first.
async fn open_data(
    args: &RunArgs,
    root: &std::path::Path,
    settings: &crate::config::Settings,
    migrations: &[db::migrations::Migration],
    alembic_heads: Option<&[String]>,
) -> anyhow::Result<Data> {
    let dir = crate::data::dir(root, args.data_dir.as_deref());
    let servers = crate::data::Servers {
        pool: args.pool(),
        ..super::ServerArgs {
            database_url: args.database_url.clone(),
            kv_url: args.kv_url.clone(),
            kv_prefix: args.kv_prefix.clone(),
        }
        .resolve(root)
    };
    let bounds = settings.db_bounds();
    let data = tokio::task::spawn_blocking(move || {
        Data::open_with(&dir, Default::default(), bounds, &servers)
    })
    .await
    .context("opening the data folder panicked")??;
    let shown = data.db.describe();
    match db::migrations::ensure(&data.db, migrations, args.migrate).await {
        Ok(applied) => {
            for name in applied {
                println!("filerouter run: applied migration {name}");
            }
            // The Alembic history is applied by `filerouter db migrate` alone (it runs the
            // project's Python with its files, which a build's instances do not have).
            crate::alembic::ensure(&data.db, alembic_heads)
                .await
                .map_err(|e| anyhow::anyhow!("the database {shown}: {e}"))?;
            Ok(data)
        }
        Err(e @ db::migrations::MigrationError::Behind(_)) => Err(anyhow::anyhow!(
            "{}: run `filerouter db migrate`, or start with `filerouter run --migrate`",
            e.to_string()
                .replacen("the database", &format!("the database {shown}"), 1)
        )),
        Err(e) => Err(anyhow::anyhow!("the database {shown}: {e}")),
    }
}

/// Instances at once per core when many tenants share the process and `--workers` does not
/// say: more than one project would use, so that a light tenant finds an instance while heavy
/// ones hold theirs (each at most its `concurrency`); the guest threads (one per core) are
/// shared between them by CPU used, so more instances do not mean more CPU for anyone.
pub const TENANT_WORKERS_PER_CORE: usize = 8;

/// `run --tenants FILE`: every tenant of the file, loaded on its first request.
async fn serve_tenants(args: RunArgs, file: PathBuf) -> anyhow::Result<()> {
    let file = std::path::absolute(&file)
        .with_context(|| format!("tenants file {} not found", file.display()))?;
    let checked = file.clone();
    let config = tokio::task::spawn_blocking(move || TenantsConfig::load(&checked))
        .await
        .context("reading the tenants file panicked")??;
    logging::init_with(Mode::Production, None, args.log_format, !args.no_access_log);
    let key = CacheKey::from_env()?;
    let workers = args
        .workers
        .unwrap_or((scheduler::cores() * TENANT_WORKERS_PER_CORE) as u32)
        .max(1);
    let scheduler = Scheduler::new(workers as usize);
    let reserve = config
        .server
        .reserve(workers as usize)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    scheduler.set_reserve(reserve);
    // The guest's compiled code is mapped and checked now, once per process, rather than in
    // the first tenant's first answer (from a cold disk, 45 ms of reading and hashing).
    let engine = tokio::task::spawn_blocking(move || {
        let engine = SandboxEngine::new(workers)?;
        engine.prepare()?;
        Ok::<_, EngineError>(engine)
    })
    .await
    .context("engine setup panicked")??;
    scheduler.set_preemption(engine.preemption());
    let count = config.tenants.len();
    let drain = config
        .tenants
        .iter()
        .map(|t| t.limits.wall)
        .max()
        .unwrap_or_default()
        .min(Duration::from_secs(30))
        + Duration::from_secs(1);
    for tenant in &config.tenants {
        if tenants::load::CacheStamp::of(&tenant.cache_dir).is_none() {
            tracing::warn!(
                "tenant {}: no build cache in {} yet: its requests get 503 until `filerouter build` writes one",
                tenant.name,
                tenant.cache_dir.display()
            );
        }
    }
    let tenants = Tenants::new(engine, scheduler, &file, config, key);

    let listener = super::listen(&ServerSettings::default(), args.host.clone(), args.port).await?;
    let address = listener.local_addr().context("no local address")?;
    // Tenants load on their first request: the process is ready once it serves.
    let health = Health::default();
    let admin_address = start_admin(&args, &health, Some(tenants.clone()), None).await?;
    println!(
        "filerouter run: serving {count} tenants from {} at http://{address} (mode: {}, workers: {workers})",
        file.display(),
        Mode::Production.name(),
    );
    announce_admin(admin_address);
    tenants::watch::spawn(tenants.clone());
    let serving = serving(&args, health, drain);
    serving.health.loaded();
    server::serve(listener, Site::Tenants(tenants), serving).await;
    println!("filerouter run: stopped");
    Ok(())
}
