//! The command line: one module per command, like wasmtime's own CLI.
//!
//! `init` creates a project, `dev` serves one with hot reload, `build` writes the build cache
//! that `run` serves from in production, `status` and `clean` report on and remove it;
//! `plugins stubs` writes `.pyi` stubs for the project's plugins.

mod build;
mod clean;
mod db;
mod dev;
mod init;
mod packages;
mod plugins;
mod project_command;
mod replay;
mod run;
mod status;

use std::{path::PathBuf, process::ExitCode};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Turn a folder of Python route files into an HTTP API, run in a WebAssembly sandbox.
#[derive(Debug, Parser)]
#[command(name = "filerouter", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new project folder NAME with routes/, config.py, public/ and .gitignore.
    Init {
        /// The folder to create.
        name: PathBuf,
    },
    /// Serve the project with hot reload and detailed error pages.
    Dev(ServeArgs),
    /// Import and snapshot every route once, and write the compressed build cache.
    Build(BuildArgs),
    /// Serve the project from its build cache, in production mode.
    Run(Box<RunArgs>),
    /// Report whether a build cache exists, when it was made and what it holds.
    Status(CacheArgs),
    /// Remove the build cache.
    Clean(CacheArgs),
    /// Work with the project's plugins (`plugins stubs` writes .pyi stubs for editors).
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// The project's pure-Python packages (requirements.txt or pyproject.toml), for the sandbox.
    #[command(subcommand)]
    Packages(PackagesCommand),
    /// The project's database: apply migrations/*.sql, or show where it stands.
    #[command(subcommand)]
    Db(DbCommand),
    /// Run a request recorded by `run --record` again, on the same build, with the recorded
    /// answers in place of the real services; show its result as `dev` does, or where it
    /// diverged from the recording.
    Replay(ReplayArgs),
    /// A project command from config.py's `commands` (listed below when run in a project).
    #[command(external_subcommand)]
    Project(Vec<String>),
}

/// `filerouter plugins ...`.
#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Write .pyi stubs for `filerouter.plugins.*` from each plugin's WIT (for editors and
    /// type checkers).
    Stubs {
        /// The project folder.
        #[arg(long, default_value = ".")]
        project: PathBuf,
        /// Where to write them [default: typings/ in the project, where Pyright looks].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Options of `filerouter build`.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// zstd level, 1 (fastest) to 9 (smallest) [default: config.py's build.compression_level, else 6].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=9))]
    pub compression: Option<u8>,
    /// Encrypt the cache with AES-256-GCM under the key in FILEROUTER_CACHE_KEY (64 hex characters).
    #[arg(long)]
    pub encrypt: bool,
    /// Build even if the cache is up to date.
    #[arg(long)]
    pub force: bool,
}

/// Options of `filerouter run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The address to listen on [default: the build's server.host, else 127.0.0.1].
    #[arg(long)]
    pub host: Option<String>,
    /// The port to listen on; 0 picks a free one [default: the build's server.port, else 8000].
    #[arg(long)]
    pub port: Option<u16>,
    /// How many requests run in the sandbox at once [default: the build's server.workers, else 64].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub workers: Option<u32>,
    /// The build cache, relative to the project [default: config.py's build.cache_dir, else .cache].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Serve many projects, chosen by the request's host, as tenants.toml FILE describes
    /// (instead of --project).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["project", "cache_dir"])]
    pub tenants: Option<PathBuf>,
    /// Where the project's database and kv store live [default: FILEROUTER_DATA_DIR, else
    /// .data/ in the project]. Tenants name theirs in the tenants file.
    #[arg(long, conflicts_with = "tenants")]
    pub data_dir: Option<PathBuf>,
    /// Apply the build's pending migrations before serving (without it, a database behind
    /// its migrations is an error).
    #[arg(long, conflicts_with = "tenants")]
    pub migrate: bool,
    /// Keep the project's database in Postgres (postgres://user:password@host:port/db, TLS by
    /// ?sslmode=verify-full&sslrootcert=CA.pem), so that several processes share it [default:
    /// FILEROUTER_DATABASE_URL, else the data folder]. Tenants name theirs in the tenants file.
    #[arg(long, value_name = "URL", conflicts_with = "tenants")]
    pub database_url: Option<String>,
    /// Route code's connections to the Postgres database this process keeps open at most
    /// [default: 32]. Tenants set theirs in the tenants file.
    #[arg(long, value_name = "N", value_parser = pool_size, conflicts_with = "tenants")]
    pub db_pool_size: Option<usize>,
    /// How long opening a Postgres connection (TCP, TLS, login) may take, in seconds
    /// [default: 10].
    #[arg(long, value_name = "SECONDS", value_parser = pool_timeout, conflicts_with = "tenants")]
    pub db_connect_timeout: Option<std::time::Duration>,
    /// How long a request waits for a free Postgres connection when all are in use, in seconds
    /// [default: 5].
    #[arg(long, value_name = "SECONDS", value_parser = pool_timeout, conflicts_with = "tenants")]
    pub db_checkout_timeout: Option<std::time::Duration>,
    /// Keep filerouter.kv on a Redis server (redis://[user:password@]host:port[/db])
    /// [default: FILEROUTER_KV_URL, else the data folder].
    #[arg(long, value_name = "URL", conflicts_with = "tenants")]
    pub kv_url: Option<String>,
    /// The prefix of the project's keys on the Redis server, not starting with filerouter:
    /// [default: filerouter:p:NAME: with the project folder's name].
    #[arg(long, value_name = "PREFIX", conflicts_with = "tenants")]
    pub kv_prefix: Option<String>,
    /// Serve Prometheus metrics (/metrics), liveness (/livez), readiness (/readyz) and
    /// health (/healthz) on ADDR (host:port), apart from the public port.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// Answer readiness on the public port too, at PATH (/healthz, say): 200 when ready, 503
    /// while starting, draining or a backend is down. Never routed to the project.
    #[arg(long, value_name = "PATH", value_parser = health_path)]
    pub health_path: Option<String>,
    /// After SIGTERM, keep serving new connections this long, readiness already 503, so that
    /// a load balancer stops sending first [default: 0].
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub drain_delay: Option<std::time::Duration>,
    /// Then, how long the requests in flight may take to finish before they are stopped
    /// [default: the longest wall_s of the sandbox limits, at most 30, plus 1].
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub graceful_timeout: Option<std::time::Duration>,
    /// How log lines are written: text, or one JSON object per line.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub log_format: crate::access_log::LogFormat,
    /// No access line per request (they are on by default, at info level).
    #[arg(long)]
    pub no_access_log: bool,
    /// Record every request's clocks, randomness and host calls; keep the traces of 5xx
    /// answers (and --record-sample of the others) in the data folder's traces/ (a tenant's in
    /// its own), listed and fetched on the admin address, replayed by `filerouter replay`.
    /// With --tenants: `record = true` in a tenant's section instead. `record =
    /// {"enabled": True, ...}` in config.py turns it on too (these flags override its values).
    #[arg(long, conflicts_with = "tenants")]
    pub record: bool,
    /// The fraction (0 to 1) of requests that did not answer 5xx whose traces are kept too
    /// [default: 0].
    #[arg(long, value_name = "FRACTION", value_parser = fraction, requires = "record")]
    pub record_sample: Option<f64>,
    /// Traces kept at most, the oldest removed first [default: 100].
    #[arg(long, value_name = "N", requires = "record")]
    pub record_max: Option<usize>,
    /// MiB the kept traces take at most together, the oldest removed first [default: 64].
    #[arg(long, value_name = "MIB", requires = "record")]
    pub record_max_mb: Option<u64>,
    /// A request header whose value is never recorded (a hash instead); repeat for several
    /// [default: authorization, cookie, proxy-authorization, x-api-key].
    #[arg(long, value_name = "NAME", requires = "record")]
    pub record_redact_header: Vec<String>,
}

impl RunArgs {
    /// What `--record` and its options say over `config.py`'s `record` (`project`); None
    /// when neither turns recording on.
    pub fn record_settings(
        &self,
        project: &crate::config::RecordConfig,
    ) -> Option<crate::replay::RecordSettings> {
        if !self.record && project.enabled != Some(true) {
            return None;
        }
        let base = crate::replay::RecordSettings::from_project(project);
        Some(crate::replay::RecordSettings {
            sample: self.record_sample.unwrap_or(base.sample),
            redact_headers: if self.record_redact_header.is_empty() {
                base.redact_headers
            } else {
                self.record_redact_header
                    .iter()
                    .map(|name| name.to_ascii_lowercase())
                    .collect()
            },
            max_traces: self.record_max.unwrap_or(base.max_traces),
            max_bytes: self
                .record_max_mb
                .map_or(base.max_bytes, |mb| mb.saturating_mul(1024 * 1024)),
            max_tape_bytes: base.max_tape_bytes,
        })
    }
}

/// A fraction from 0 to 1.
fn fraction(given: &str) -> Result<f64, String> {
    match given.parse::<f64>() {
        Ok(value) if (0.0..=1.0).contains(&value) => Ok(value),
        _ => Err(format!("{given:?} is not a number from 0 to 1")),
    }
}

/// `--health-path`: an absolute path without a query.
fn health_path(given: &str) -> Result<String, String> {
    if given.starts_with('/') && !given.contains(['?', '#', ' ']) {
        Ok(given.to_string())
    } else {
        Err("a path starting with / (such as /healthz), without ? or #".into())
    }
}

/// A number of seconds (a decimal fraction allowed), at most an hour.
fn seconds(given: &str) -> Result<std::time::Duration, String> {
    let value: f64 = given
        .parse()
        .map_err(|_| format!("{given:?} is not a number of seconds"))?;
    if !(0.0..=3600.0).contains(&value) {
        return Err(format!("{given} is not between 0 and 3600 seconds"));
    }
    std::time::Duration::try_from_secs_f64(value).map_err(|e| e.to_string())
}

fn pool_size(given: &str) -> Result<usize, String> {
    crate::db::postgres::PoolSettings::size(given).map_err(|e| e.to_string())
}

fn pool_timeout(given: &str) -> Result<std::time::Duration, String> {
    crate::db::postgres::PoolSettings::timeout(given).map_err(|e| e.to_string())
}

impl RunArgs {
    /// The Postgres pool's settings: the flags over the defaults.
    pub fn pool(&self) -> crate::db::postgres::PoolSettings {
        let default = crate::db::postgres::PoolSettings::default();
        crate::db::postgres::PoolSettings {
            size: self.db_pool_size.unwrap_or(default.size),
            connect_timeout: self.db_connect_timeout.unwrap_or(default.connect_timeout),
            checkout_timeout: self.db_checkout_timeout.unwrap_or(default.checkout_timeout),
        }
    }
}

/// `filerouter db ...`
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Apply the pending migrations (migrations/*.sql, in name order, each once), then the
    /// project's Alembic history if it has one (alembic/: `alembic upgrade heads`, in the
    /// sandbox).
    Migrate(DbArgs),
    /// List the migrations applied and pending, the Alembic revisions, and where the database
    /// is.
    Status(DbArgs),
    /// Run Alembic's command line on the project's history in the sandbox, against the
    /// project's database: `filerouter db alembic revision --autogenerate -m "add posts"`,
    /// `... downgrade -1`, `... history`, `... init alembic`. What it writes (a new revision)
    /// lands in alembic/.
    Alembic(AlembicArgs),
    /// Copy the project's SQLite database (and its kv store) into FILE, consistent while a
    /// server writes to it. On Postgres: pg_dump (docs/guides/data.md).
    Backup(BackupArgs),
    /// Replace the project's SQLite database with the backup FILE, with the server stopped;
    /// what it replaces is kept beside it. On Postgres: pg_restore (docs/guides/data.md).
    Restore(BackupArgs),
}

/// Options of `filerouter db alembic`.
#[derive(Debug, clap::Args)]
pub struct AlembicArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Alembic's own arguments (`revision --autogenerate -m "..."`), after the options above.
    #[arg(
        value_name = "ALEMBIC_ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true
    )]
    pub args: Vec<String>,
}

/// Options of `filerouter db backup` and `db restore`.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The backup file (backup: a new file; restore: one `db backup` made).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub db: DbArgs,
}

/// Options of `filerouter db ...`.
#[derive(Debug, clap::Args)]
pub struct DbArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// Where the project's database lives [default: FILEROUTER_DATA_DIR, else .data/ in the
    /// project].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub servers: ServerArgs,
}

/// The servers that keep a project's data instead of its data folder (operator settings).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerArgs {
    /// Keep the project's database in Postgres (postgres://user:password@host:port/db, TLS by
    /// ?sslmode=verify-full&sslrootcert=CA.pem), so that several processes share it [default:
    /// FILEROUTER_DATABASE_URL, else the data folder].
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Keep filerouter.kv on a Redis server (redis://[user:password@]host:port[/db])
    /// [default: FILEROUTER_KV_URL, else the data folder].
    #[arg(long, value_name = "URL")]
    pub kv_url: Option<String>,
    /// The prefix of the project's keys on the Redis server, not starting with filerouter:
    /// [default: filerouter:p:NAME: with the project folder's name].
    #[arg(long, value_name = "PREFIX")]
    pub kv_prefix: Option<String>,
}

impl ServerArgs {
    /// The servers for the project at `root`: the flags, else `FILEROUTER_DATABASE_URL` and
    /// `FILEROUTER_KV_URL`; the kv prefix from the flag, else the project folder's name.
    pub fn resolve(&self, root: &std::path::Path) -> crate::data::Servers {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        crate::data::Servers {
            database_url: self
                .database_url
                .clone()
                .or_else(|| env("FILEROUTER_DATABASE_URL"))
                .map(crate::data::ServerUrl::new),
            kv_url: self
                .kv_url
                .clone()
                .or_else(|| env("FILEROUTER_KV_URL"))
                .map(crate::data::ServerUrl::new),
            kv_prefix: match &self.kv_prefix {
                Some(prefix) => crate::data::KvPrefix::Operator(prefix.clone()),
                None => crate::data::default_kv_prefix(root),
            },
            pool: Default::default(),
        }
    }
}

/// `filerouter packages ...`
#[derive(Debug, Subcommand)]
pub enum PackagesCommand {
    /// Install requirements.txt (or pyproject.toml's [project] dependencies) into .packages/
    /// with pip or uv, refusing packages with native code.
    Install(PackagesArgs),
}

/// Options of `filerouter packages install`.
#[derive(Debug, clap::Args)]
pub struct PackagesArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// `pip` or `uv` [default: pip if the Python has it, else uv].
    #[arg(long)]
    pub installer: Option<String>,
    /// The Python whose pip installs [default: python3].
    #[arg(long)]
    pub python: Option<String>,
}

/// Options of `filerouter replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The trace file (fetched from the admin address's /traces/ID).
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// The project folder, whose build cache must be the one the trace was recorded on.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The build cache, relative to the project [default: config.py's build.cache_dir, else .cache].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Run the project's current source instead of the build (to try a fix against a real
    /// failure): allowed with a warning, and a changed route shows as a divergence.
    #[arg(long)]
    pub source: bool,
    /// Also write the replayed response's body to FILE, byte for byte.
    #[arg(long, value_name = "FILE")]
    pub body: Option<PathBuf>,
}

/// Options of `filerouter status` and `filerouter clean`.
#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The build cache, relative to the project [default: config.py's build.cache_dir, else .cache].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

/// Where to find the project and where to listen.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The address to listen on [default: config.py's server.host, else 127.0.0.1].
    #[arg(long)]
    pub host: Option<String>,
    /// The port to listen on; 0 picks a free one [default: config.py's server.port, else 8000].
    #[arg(long)]
    pub port: Option<u16>,
    /// Where the project's database and kv store live [default: FILEROUTER_DATA_DIR, else
    /// .data/ in the project].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub servers: ServerArgs,
    /// `dev` only: record every request (as `run --record` does; also on with `record =
    /// {"enabled": True}` in config.py) and keep the traces of 5xx and 499 answers (and
    /// config.py's `record["sample"]` of the others) in the data folder's traces/, for
    /// `filerouter replay`, which replays them on the current source.
    #[arg(long)]
    pub record: bool,
    /// Tests only: a Python file whose `dependency_overrides = {dependency: replacement}`
    /// replaces the project's dependencies in every request, as FastAPI's
    /// `app.dependency_overrides` does (filerouter.testing.TestClient's `dependency_overrides=`).
    #[arg(long, value_name = "FILE")]
    pub overrides: Option<PathBuf>,
}

/// The project's build cache folder: `flag` if given; else `.cache` if it exists; else
/// config.py's `build.cache_dir` (evaluated in the sandbox, only then); else `.cache`.
fn cache_dir(root: &std::path::Path, flag: Option<&std::path::Path>) -> anyhow::Result<PathBuf> {
    if let Some(flag) = flag {
        return Ok(root.join(flag));
    }
    let default = root.join(".cache");
    if default.exists() {
        return Ok(default);
    }
    Ok(project_command::load_settings(root)?
        .map_or(default, |settings| settings.build.cache_dir(root)))
}

/// The async runtime a command runs on: [`async_threads`] worker threads, unless
/// `TOKIO_WORKER_THREADS` sets how many, in the class that follows the guests' calls
/// ([`crate::scheduler::async_thread_started`]).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let threads = match std::env::var_os("TOKIO_WORKER_THREADS") {
        None => async_threads(crate::scheduler::cores()),
        // Read here rather than by Tokio, which panics on a value it cannot use.
        Some(value) => value
            .to_str()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "TOKIO_WORKER_THREADS must be a whole number of threads, 1 or more, not {value:?}"
                )
            })?,
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .on_thread_start(crate::scheduler::async_thread_started)
        .on_thread_stop(crate::scheduler::async_thread_stopped)
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))
}

/// How many async threads a machine of `cores` gets: half as many as guest threads (one per
/// core, `scheduler::threads`), at least one. The async threads accept connections, read
/// and write HTTP and wait on the host's I/O; the guests' Python runs on the guest threads.
/// One thread more per core than the machine has costs a context switch and a wake-up
/// between threads several times a request: on 2 cores, one async thread instead of two
/// used about 9 % less CPU a request (`bench/README.md`).
fn async_threads(cores: usize) -> usize {
    cores.div_ceil(2)
}

/// How long a stopping server waits for work left on the runtime's blocking threads (a file
/// system that hangs, say) once the requests in flight are done or stopped: then it exits
/// anyway, abandoning that work.
pub const ABANDON_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Run `server` (a `dev` or `run` command) on a runtime of its own, and stop within
/// [`ABANDON_AFTER`] once it returns, whatever is still running on the runtime's threads.
fn serve_until_stopped(
    server: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    // Traces (`OTEL_*`), before the runtime: the exporter's client keeps a runtime of its own.
    crate::traces::init()?;
    let runtime = runtime()?;
    let result = runtime.block_on(server);
    runtime.shutdown_timeout(ABANDON_AFTER);
    // The spans of the last requests, after the drain.
    crate::traces::shutdown(TRACES_FLUSH);
    result
}

/// How long the last export of spans may take on the way out.
const TRACES_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// Listen where the flags, else config.py's `server`, else the defaults say.
async fn listen(
    server: &crate::config::ServerSettings,
    host: Option<String>,
    port: Option<u16>,
) -> anyhow::Result<tokio::net::TcpListener> {
    let (host, port) = server.address(host, port);
    tokio::net::TcpListener::bind((host.as_str(), port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {host}:{port}: {e}"))
}

/// Parse the command line. Help asked for in a project folder also lists the project's
/// commands (which means evaluating its config.py in the sandbox).
pub fn parse() -> Cli {
    let mut command = Cli::command();
    let args: Vec<String> = std::env::args().collect();
    let wants_help = args.len() == 1
        || args[1..]
            .iter()
            .any(|a| a == "--help" || a == "-h" || a == "help");
    if wants_help && let Some(section) = project_command::help_section() {
        command = command.after_help(section);
    }
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    match cli.command {
        Command::Init { name } => done(init::run(&name)),
        Command::Dev(args) => done(dev::run(args)),
        Command::Build(args) => done(build::run(args)),
        Command::Run(args) => done(run::run(*args)),
        Command::Status(args) => done(status::run(args)),
        Command::Clean(args) => done(clean::run(args)),
        Command::Plugins(command) => done(plugins::run(command)),
        Command::Packages(command) => done(packages::run(command)),
        Command::Db(command) => done(db::run(command)),
        Command::Replay(args) => replay::run(args),
        Command::Project(args) => project_command::run(args),
    }
}
