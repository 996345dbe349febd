//! The WebAssembly sandbox: every call into project Python runs in a fresh guest instance.
//!
//! [`Sandbox`] owns one project's guest (compiled for the process's engine, see [`engine`]) and
//! one `InstancePre`. Each call ([`Sandbox::handle`], [`Sandbox::inspect_route`],
//! [`Sandbox::load_config`]) makes a new `Store` and instance with the project's `routes/`
//! preopened read-only (in development; production instances see no files at all), runs one
//! export, and drops the instance: nothing survives a call. [`snapshot`] bakes the project's
//! modules into the guest for production. The project's plugins ride along through the traits
//! of [`plugin_calls`] (`crate::plugins` implements them; the sandbox names none of its types):
//! each call gets a plugin session whose instances are made on first use and dropped with it.
//! Below the sandbox: its settings (`crate::config`, where [`Limits`] is defined), the
//! scheduler, the data; above it: the plugins, the project, the tenants, the server.
//! Limits (memory, time) are enforced per call; see [`Limits`]. Every call waits for its
//! turn in a [`crate::scheduler`] queue and runs on the scheduler's guest threads, which
//! count the CPU time it uses: requests in the sandbox's own queue under the project's
//! limits, route inspections and `config.py` in the scheduler's tooling queue under
//! [`TOOLING_TIME`], whatever the request limits are; the project's start-up hook
//! ([`Sandbox::startup`]) in the tooling queue too, with the request's settings and secrets,
//! and so does the project's Alembic history ([`Sandbox::alembic`], under [`MIGRATION_TIME`]),
//! whose instance alone also sees a folder the host staged for it, as `/project`.
//! A request whose handler left background tasks answers before its call ends: the rest of the
//! call runs on in a task of its own ([`background`]).
//!
//! This module knows nothing about HTTP routing; it only runs the guest.

pub(crate) mod artifacts;
pub mod background;
mod bindings;
pub(crate) mod checked_code;
mod compiled_functions;
mod config_py;
pub mod engine;
mod guest;
mod hot_pages;
pub mod image;
mod layer;
mod limits;
mod lingering;
pub mod live_snapshot;
pub mod output;
pub mod plugin_calls;
pub mod reset;
mod services;
pub mod slots;
pub mod snapshot;
pub mod socket;
mod stdlib;
pub mod stream;
mod tap;

use std::{
    future::Future,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use wasmtime::{Store, UpdateDeadline, component::ResourceTable};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub use crate::config::Limits;
pub use bindings::filerouter::sandbox::plugins::{
    CallError as PluginCallError, FunctionInfo as PluginFunctionInfo, Node as PluginNode,
};
pub use bindings::filerouter::sandbox::types::{
    HandlerInfo, HandlerParam, HttpRequest, HttpResponse, PageTarget, ParamValue, PathParam,
    ProjectError, RouteInspection, RouteTarget, Target,
};
pub use config_py::ConfigError;
pub use guest::{SHA256 as GUEST_SHA256, wasm as guest_wasm};
pub use limits::MemoryLimiter;
pub use services::Upstream;

use crate::{
    data::Data,
    db,
    environment::Environment,
    kv::KvStore,
    scheduler::{Budget, Overrun, Queue, Rejected, Stopped, TimeLimits, Verdict},
};

use bindings::RouterPre;
use plugin_calls::{PluginCall, PluginSession, PluginSet};

/// Why a call into the guest produced no answer from project code.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Project code raised, or a route file failed to import.
    #[error("{}: {}", .0.kind, .0.message)]
    Project(Box<ProjectError>),
    /// The call ran past its CPU or wall-clock limit and was stopped.
    #[error("{0}")]
    Timeout(Overrun),
    /// The call's queue was full; it never ran.
    #[error("{0}")]
    Busy(Rejected),
    /// The guest trapped after the memory cap refused it more memory.
    #[error("the guest ran out of memory: {0}")]
    MemoryCap(String),
    /// The guest trapped for another reason (`os.abort()`, a runtime panic).
    #[error("the sandbox stopped the guest: {0}")]
    Trap(String),
    /// The guest's call stack ran out ([`engine::MAX_WASM_STACK`]): code that checks no
    /// recursion depth walked or freed a structure nested too deep.
    #[error("the guest's call stack ran out: {0}")]
    StackExhausted(String),
    /// Project code ended the instance (`os._exit(status)`).
    #[error("the guest exited with status {0}")]
    Exited(i32),
    /// No instance could be made (the pool is exhausted or the component does not link).
    #[error("could not start a sandbox instance: {0}")]
    Instantiate(String),
    /// The sandbox could not be set up for this call (the routes folder is missing, ...).
    #[error("could not prepare the sandbox: {0}")]
    Setup(String),
}

impl ProjectError {
    /// Where it was raised, for a log line: ` at FILE:LINE`, ` at FILE`, or nothing.
    pub(crate) fn at(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!(" at {file}:{line}"),
            (Some(file), None) => format!(" at {file}"),
            _ => String::new(),
        }
    }
}

/// What a [`Store`] holds for one call: WASI state, the memory limiter, the host services.
struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    /// The request's memory cap, shared with the plugins it calls.
    limits: MemoryLimiter,
    /// The project's key-value store (`filerouter.kv`).
    kv: Arc<KvStore>,
    /// This call's connections to the project's database (`sqlite3`, `filerouter.db`):
    /// rolled back where uncommitted when the call ends, however it ends.
    db: db::Session,
    /// The host's answer for middleware's `call_next`, when the host serves the target.
    upstream: Option<Upstream>,
    /// Where a request's response goes when the guest sends it before the call ends, to run
    /// background tasks after it (`background.respond`) or to stream its body
    /// (`response-stream.start`); taken by the first send.
    early: Option<stream::EarlySender>,
    /// What a request's call needs to start a stream; None in the server's own calls.
    stream_setup: Option<stream::Setup>,
    /// The started stream's writer (`response-stream.write`); dropped with the call, which ends the
    /// stream's count in its project.
    stream: Option<stream::Writer>,
    /// What a WebSocket request's call needs to accept its connection; taken by `accept`.
    socket_setup: Option<socket::Setup>,
    /// The accepted connection (`websocket.receive`, `send`, `close`); dropped with the call,
    /// which ends its count in its project and lets the connection close.
    socket: Option<socket::Socket>,
    /// This call's plugin instances (`filerouter.plugins`), made on first use; None for a
    /// project without plugins.
    plugins: Option<Box<dyn PluginSession>>,
    /// The call's time budget, which long host computations (`passwords`) ask as they go;
    /// None outside a scheduled call (preparing slots, baking).
    budget: Option<Budget>,
    /// What `config.py` declares for route code, with the operator's values in a request's
    /// call only (`filerouter.env`, `os.environ`).
    environment: Environment,
    /// This call's outbound HTTP calls (`filerouter.http`); None in the server's own calls,
    /// which may make none.
    outbound: Option<crate::outbound::Session>,
    /// While `bake` runs: the objects the guest listed to make immortal (`snapshot.immortal`),
    /// as (address, type address) pairs, flat. None in every other call, which ignores them.
    immortal: Option<Vec<u32>>,
    /// The call's spans (`crate::traces`) while traces are exported and the call is a
    /// request's: the host services' and route code's own open under it. Dropped, with the
    /// call, it ends those still open.
    trace: Option<crate::traces::CallTrace>,
    /// A request's call being recorded or replayed (`crate::replay`, `tap`); None otherwise.
    tap: Option<crate::replay::Tap>,
}

impl CallState {
    /// A call's state; `limits` is the guest instance's memory limiter (which announces the
    /// project's image, see [`MemoryLimiter::for_guest`]).
    fn new(wasi: WasiCtx, limits: MemoryLimiter, data: &Data, deadline: Instant) -> Self {
        Self {
            wasi,
            table: ResourceTable::new(),
            limits,
            kv: data.kv.clone(),
            db: data.db.session(deadline),
            upstream: None,
            early: None,
            stream_setup: None,
            stream: None,
            socket_setup: None,
            socket: None,
            plugins: None,
            budget: None,
            environment: Environment::default(),
            outbound: None,
            immortal: None,
            trace: None,
            tap: None,
        }
    }
}

/// Link everything the guest imports: WASI, and the host services of `wit/filerouter.wit`.
fn link(linker: &mut wasmtime::component::Linker<CallState>) -> wasmtime::Result<()> {
    // componentize-py's runtime imports every WASI 0.2 interface, sockets included. They are
    // all linked; the per-call WasiCtx grants no network and no files but `routes/`.
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    crate::read_only_files::link(linker)?;
    bindings::Router::add_to_linker::<_, wasmtime::component::HasSelf<CallState>>(linker, |s| s)
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The guest component, compiled and linked, ready to be instantiated once per call.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    guest: engine::Guest,
    /// The guest linked to the host's interfaces: made once per guest, since linking
    /// depends on none of the fields below; every variant of the sandbox shares it.
    pre: RouterPre<CallState>,
    /// Preopened read-only as `/routes` in development; `None` in production, where the route
    /// modules are in the baked guest and instances see no files.
    routes_dir: Option<PathBuf>,
    limits: Limits,
    /// The project's database and key-value store; kept when the limits change.
    data: Data,
    /// The project's plugins (None: it has none); kept when the limits change.
    plugins: Option<Arc<dyn PluginSet>>,
    /// Where this project's requests wait for their turn; kept when the limits change.
    queue: Queue,
    /// Settings and secrets for route code: the values go to requests' calls only, and are
    /// redacted from what the guest prints and from its errors.
    environment: Environment,
    /// The same declarations without values, for the server's own calls.
    declared: Environment,
    /// What route code may call over HTTP; requests' and the start-up hook's calls only.
    outbound: Arc<crate::outbound::Gate>,
    /// The project's streamed responses open now; kept when the limits change.
    streams: stream::OpenStreams,
    /// Records its requests (`run` with recording on); None: recording off.
    recorder: Option<Arc<crate::replay::Recorder>>,
}

/// What a request's call hands over before it ends.
pub(crate) enum Early {
    /// The whole response; background tasks run after it (`background.respond`).
    Response(HttpResponse),
    /// The head of a streamed response, and its body (`response-stream.start`).
    Stream(HttpResponse, stream::Stream),
    /// The 101 answer to a WebSocket handshake, and the connection (`websocket.accept`).
    Socket(HttpResponse, socket::Connection),
}

/// A request's answer.
pub enum Answer {
    /// A whole response.
    Whole(HttpResponse),
    /// A streamed response: its head (its own body is empty) and its body.
    Streamed(HttpResponse, stream::StreamBody),
    /// 101 Switching Protocols: hyper hands the connection to the WebSocket once it is sent.
    Switched(HttpResponse),
}

/// The time limits of the server's own calls into the guest (inspecting a route file,
/// evaluating `config.py`): generous and fixed, so that a project of any size loads whatever
/// its request limits are.
pub const TOOLING_TIME: TimeLimits = TimeLimits {
    cpu: Duration::from_secs(10),
    wall: Duration::from_secs(60),
};

/// Whose call it is: a request's, the server's own, or the project's start-up hook (the
/// server's queue and time, the request's settings and secrets).
#[derive(Debug, Clone)]
enum Purpose {
    /// A request's call, taped when recorded or replayed.
    Request(Option<crate::replay::Tap>),
    Tooling,
    Startup,
    /// `bake` in an ordinary instance for `dev`'s live snapshot ([`live_snapshot`]): as
    /// tooling, but without files, collecting the objects to make immortal, under
    /// [`live_snapshot::SNAPSHOT_TIME`], with `watch` told where the memory is.
    Snapshot(Arc<slots::MemoryWatch>),
    /// The project's Alembic history ([`Sandbox::alembic`]): as the start-up hook, under
    /// [`MIGRATION_TIME`], with a folder of the host's preopened as `/project`.
    Migration(Arc<Staged>),
    /// Compiling the project's packages to bytecode ([`Sandbox::compile_packages`]): as
    /// tooling (no operator values, no network), under [`MIGRATION_TIME`], with `.packages/`
    /// preopened writable as `/packages`.
    Compile(Arc<Staged>),
}

impl Purpose {
    /// How a call's span names it (`filerouter.call`).
    fn name(&self) -> &'static str {
        match self {
            Purpose::Request(_) => "request",
            Purpose::Tooling => "tooling",
            Purpose::Startup => "startup",
            Purpose::Snapshot(_) => "snapshot",
            Purpose::Migration(_) => "migration",
            Purpose::Compile(_) => "compile",
        }
    }
}

/// A folder the host prepared for one call, which the guest sees as `at`: the copy of the
/// project's Alembic history that `crate::alembic` stages (`/project`), or the project's
/// `.packages/` to compile (`/packages`). Read-only unless `writable`.
#[derive(Debug)]
pub struct Staged {
    pub dir: PathBuf,
    pub writable: bool,
    pub at: &'static str,
}

/// The time limits of a run of the project's migrations (`filerouter db migrate`, `dev`'s
/// start): an import of SQLAlchemy and Alembic from source and DDL on a large table take far
/// longer than a request, and only the developer or the operator starts one.
pub const MIGRATION_TIME: TimeLimits = TimeLimits {
    cpu: Duration::from_secs(120),
    wall: Duration::from_secs(600),
};

/// What a guest export's call returns, borrowing the call's store.
type ExportFuture<'a, T> =
    Pin<Box<dyn Future<Output = wasmtime::Result<Result<T, ProjectError>>> + Send + 'a>>;

impl Sandbox {
    /// Link `guest` for the project whose route files live in `routes_dir` (`None`: a baked
    /// guest that needs no files), with data that lasts as long as the sandbox
    /// ([`Data::default`]). Its requests wait for their turn in `queue`.
    pub fn new(
        guest: engine::Guest,
        routes_dir: Option<&Path>,
        limits: Limits,
        queue: Queue,
    ) -> Result<Self, SandboxError> {
        Self::with_data(guest, routes_dir, limits, Data::default(), queue)
    }

    /// [`Sandbox::new`] with the project's database and key-value store (kept across reloads).
    /// It has no plugins, no environment and no outbound calls until the `with_*` builders
    /// give them; this is the one place the guest is linked.
    pub fn with_data(
        guest: engine::Guest,
        routes_dir: Option<&Path>,
        limits: Limits,
        data: Data,
        queue: Queue,
    ) -> Result<Self, SandboxError> {
        let pre = guest
            .instance_pre::<CallState>(link)
            .map_err(|e| SandboxError::Setup(e.to_string()))?;
        let pre = RouterPre::new(pre).map_err(|e| SandboxError::Setup(format!("{e:#}")))?;
        let environment = Environment::default();
        Ok(Self {
            inner: Arc::new(Inner {
                guest,
                pre,
                routes_dir: routes_dir.map(Path::to_path_buf),
                limits,
                data,
                plugins: None,
                queue,
                declared: environment.without_values(),
                environment,
                outbound: Arc::new(crate::outbound::Gate::closed()),
                streams: stream::OpenStreams::default(),
                recorder: None,
            }),
        })
    }

    /// This sandbox with `change` made: the same linked guest, so it cannot fail.
    fn rebuilt(&self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = (*self.inner).clone();
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The same guest and project with other limits (after `config.py` changed).
    pub fn with_limits(&self, limits: Limits) -> Self {
        self.rebuilt(|inner| inner.limits = limits)
    }

    /// The same guest, project and plugins with other limits and data (a tenant reconfigured).
    pub fn reconfigured(&self, limits: Limits, data: Data) -> Self {
        self.rebuilt(|inner| {
            inner.limits = limits;
            inner.data = data;
        })
    }

    /// The same guest and project with other plugins (at start, and when `dev` reloads them).
    pub fn with_plugins(&self, plugins: impl PluginSet + 'static) -> Self {
        let plugins: Arc<dyn PluginSet> = Arc::new(plugins);
        self.rebuilt(|inner| inner.plugins = Some(plugins))
    }

    /// The same guest, project and plugins with other settings and secrets for route code (at
    /// start, and when `dev` reloads `config.py` or the env file).
    pub fn with_environment(&self, environment: Environment) -> Self {
        self.rebuilt(|inner| {
            inner.declared = environment.without_values();
            inner.environment = environment;
        })
    }

    /// The same guest, project and plugins with another outbound gate (at start, and when
    /// `config.py` or the tenants file changes).
    pub fn with_outbound(&self, outbound: Arc<crate::outbound::Gate>) -> Self {
        self.rebuilt(|inner| inner.outbound = outbound)
    }

    /// The same guest and project, its requests recorded by `recorder` (None: not recorded).
    pub fn with_recorder(&self, recorder: Option<Arc<crate::replay::Recorder>>) -> Self {
        self.rebuilt(|inner| inner.recorder = recorder)
    }

    /// The recorder of its requests, when recording is on.
    pub fn recorder(&self) -> Option<&Arc<crate::replay::Recorder>> {
        self.inner.recorder.as_ref()
    }

    /// The project's outbound gate (its metrics, for the admin port).
    pub fn outbound(&self) -> &Arc<crate::outbound::Gate> {
        &self.inner.outbound
    }

    /// The settings and secrets route code is given.
    pub fn environment(&self) -> &Environment {
        &self.inner.environment
    }

    /// The project's key-value store.
    pub fn kv(&self) -> &Arc<KvStore> {
        &self.inner.data.kv
    }

    /// The project's database and key-value store.
    pub fn data(&self) -> &Data {
        &self.inner.data
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The queue this project's requests wait in.
    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    /// Serve one request: middleware (if any) around `target`. `root_files` are the sources of
    /// the project's root Python files (empty for a baked guest); `upstream` answers
    /// `call_next` for a [`Target::Host`]; `handshake` is the WebSocket handshake of a request
    /// to a `WEBSOCKET` handler, which its `accept` answers.
    pub async fn handle(
        &self,
        request: HttpRequest,
        target: Target,
        root_files: &[(String, String)],
        upstream: Option<Upstream>,
        handshake: Option<socket::Handshake>,
    ) -> Result<Answer, SandboxError> {
        // Recording on: the request's tape (a streamed response's and a WebSocket session's
        // whole life included).
        let tap = self.inner.recorder.as_ref().map(|recorder| {
            crate::replay::Tap::Record(recorder.start(
                tape_request(&request),
                serde_json::to_value(&target).unwrap_or_default(),
                &self.inner.environment,
            ))
        });
        self.handle_taped(request, target, root_files, upstream, handshake, tap)
            .await
    }

    /// Replay `replaying`'s trace on this sandbox (the build it was recorded on; or the
    /// project's source, with `root_files` as for [`Sandbox::handle`]): the recorded answers
    /// served for its clocks, randomness and host calls. Waits for the whole call, background
    /// tasks included; the answer's outcome, and the call's error if it failed.
    pub async fn replay(
        &self,
        replaying: Arc<crate::replay::Replaying>,
        root_files: &[(String, String)],
    ) -> (crate::replay::Outcome, Result<HttpResponse, SandboxError>) {
        let tape = replaying.tape();
        let target: Target = match serde_json::from_value(tape.target.clone()) {
            Ok(target) => target,
            Err(e) => {
                let error = SandboxError::Setup(format!("the trace's target: {e}"));
                let outcome = Err(error);
                return (tape_outcome(&outcome), outcome);
            }
        };
        let request = HttpRequest {
            method: tape.request.method.clone(),
            path: tape.request.path.clone(),
            query: tape.request.query.clone(),
            headers: tape.request.headers.clone(),
            body: tape.request.body.0.clone(),
            client: tape.request.client.clone(),
        };
        let tap = crate::replay::Tap::Replay(replaying.clone());
        let answered = self
            .handle_taped(request, target, root_files, None, None, Some(tap))
            .await
            .map(|answer| match answer {
                Answer::Whole(response) => response,
                Answer::Streamed(head, _) | Answer::Switched(head) => head,
            });
        (replaying.ended().await, answered)
    }

    async fn handle_taped(
        &self,
        request: HttpRequest,
        target: Target,
        root_files: &[(String, String)],
        upstream: Option<Upstream>,
        handshake: Option<socket::Handshake>,
        tap: Option<crate::replay::Tap>,
    ) -> Result<Answer, SandboxError> {
        let label = match &target {
            Target::Route(route) => {
                format!("{} {} routes/{}", request.method, request.path, route.file)
            }
            Target::Page(page) => format!("{} {} {}", request.method, request.path, page.file),
            Target::Host => format!("{} {} middleware.py", request.method, request.path),
        };
        let root_files = root_files.to_vec();
        // Background tasks, streams and WebSockets: the guest may send its response (a
        // streamed response's head, a handshake's 101) before the call ends
        // (`background.respond`, `response-stream.start`, `websocket.accept`), then run the
        // tasks, write the stream's chunks or talk on the socket in the same instance. The
        // answer goes out then; the rest of the call goes on in a task of its own, and how it
        // ends is logged (see `background`, `stream` and `socket`).
        let (early, mut sent) = tokio::sync::oneshot::channel();
        let setup = stream::Setup {
            limits: self.inner.limits.stream,
            open: self.inner.streams.clone(),
            cap: self.stream_cap(),
        };
        let socket_setup = handshake.map(|handshake| socket::Setup {
            handshake,
            limits: self.inner.limits.stream,
            open: self.inner.streams.clone(),
            cap: setup.cap,
        });
        let this = self.clone();
        let logged = label.clone();
        let ending = tap.clone();
        let mut call = Box::pin(async move {
            // Dropped before its end (the client closed the connection, and hyper dropped the
            // request's future with this call in it): the tape ends there, as a 499.
            let mut ending = Unfinished(ending);
            let outcome = this
                .call(Purpose::Request(tap), label, move |router, store| {
                    Box::pin(async move {
                        store.data_mut().upstream = upstream;
                        store.data_mut().early = Some(early);
                        store.data_mut().stream_setup = Some(setup);
                        store.data_mut().socket_setup = socket_setup;
                        router
                            .filerouter_sandbox_guest()
                            .call_handle(store, &request, &target, &root_files)
                            .await
                    })
                })
                .await;
            if let Some(tap) = ending.0.take() {
                tap.finish(tape_outcome(&outcome));
            }
            outcome
        });
        tokio::select! {
            biased;
            outcome = &mut call => match sent.try_recv() {
                // Sent, and the tasks were quick: the answer is the one sent, whatever they did.
                Ok(Early::Response(response)) => {
                    background::ended(&logged, outcome);
                    Ok(Answer::Whole(response))
                }
                // A stream that ended already: its body ends after the chunks it wrote.
                Ok(Early::Stream(head, started)) => {
                    let (body, feed) = started.split();
                    stream::supervise(logged, std::future::ready(outcome), feed);
                    Ok(Answer::Streamed(head, body))
                }
                // A socket whose handler ended already: its messages go out, then it closes.
                Ok(Early::Socket(head, connection)) => {
                    socket::supervise(logged.clone(), std::future::ready(outcome), &connection);
                    socket::serve(logged, connection);
                    Ok(Answer::Switched(head))
                }
                Err(_) => outcome.map(Answer::Whole),
            },
            Ok(early) = &mut sent => match early {
                Early::Response(response) => {
                    background::spawn(logged, call);
                    Ok(Answer::Whole(response))
                }
                Early::Stream(head, started) => {
                    let (body, feed) = started.split();
                    stream::supervise(logged, call, feed);
                    Ok(Answer::Streamed(head, body))
                }
                Early::Socket(head, connection) => {
                    socket::supervise(logged.clone(), call, &connection);
                    socket::serve(logged, connection);
                    Ok(Answer::Switched(head))
                }
            },
        }
    }

    /// How many streamed responses the project may have open at once: its setting, else half
    /// the instances its requests may use at once (its queue's concurrency, at most the
    /// scheduler's workers), at least one.
    fn stream_cap(&self) -> usize {
        if let Some(cap) = self.inner.limits.stream.max_open {
            return cap.max(1);
        }
        let queue = &self.inner.queue;
        let lanes = queue
            .stats()
            .config
            .concurrency
            .min(queue.scheduler().workers());
        (lanes / 2).max(1)
    }

    /// The project's streamed responses open now.
    pub fn open_streams(&self) -> usize {
        self.inner.streams.count()
    }

    /// Run the project's start-up hook (`startup()` in `startup.py`) in an instance of its own,
    /// with the project's data and the operator's values, under the request limits or the
    /// server's own ([`TOOLING_TIME`]), whichever are larger. `root_files` as for
    /// [`Sandbox::handle`]. Whether the project has a `startup.py`.
    pub async fn startup(&self, root_files: &[(String, String)]) -> Result<bool, SandboxError> {
        let root_files = root_files.to_vec();
        self.call(
            Purpose::Startup,
            "startup.py".into(),
            move |router, store| {
                Box::pin(async move {
                    router
                        .filerouter_sandbox_guest()
                        .call_startup(store, &root_files)
                        .await
                })
            },
        )
        .await
    }

    /// Run Alembic's command line (`args`, empty: only say where the database stands) on the
    /// history staged in `staged`, against the project's data, with the operator's values.
    /// `report_current`: also read the revisions the database is at (a build, which has no
    /// database, asks for the heads alone). The guest's answer is JSON text (see
    /// `guest-python/sandbox/alembic_history.py`); an `Err` names the file and line of what
    /// raised in `env.py` or a revision.
    pub async fn alembic(
        &self,
        args: Vec<String>,
        report_current: bool,
        staged: Staged,
    ) -> Result<String, SandboxError> {
        let label = match args.first() {
            Some(command) => format!("alembic {command}"),
            None => "alembic".into(),
        };
        self.call(
            Purpose::Migration(Arc::new(staged)),
            label,
            move |router, store| {
                Box::pin(async move {
                    router
                        .filerouter_sandbox_guest()
                        .call_alembic(store, &args, report_current)
                        .await
                })
            },
        )
        .await
    }

    /// Compile every module of the packages in `dir` (a project's `.packages/`) to bytecode
    /// beside it, in the guest (`compile-packages` in `wit/filerouter.wit`): how many modules
    /// it compiled. `filerouter packages install` calls it, so that `dev`, `build` and the `db`
    /// commands unmarshal the packages' modules instead of compiling them on every start.
    pub async fn compile_packages(&self, dir: PathBuf) -> Result<u32, SandboxError> {
        let staged = Staged {
            dir,
            writable: true,
            at: "/packages",
        };
        self.call(
            Purpose::Compile(Arc::new(staged)),
            "compiling .packages/".into(),
            move |router, store| {
                Box::pin(async move {
                    router
                        .filerouter_sandbox_guest()
                        .call_compile_packages(store)
                        .await
                })
            },
        )
        .await
    }

    /// Import a route file in the guest and describe its handlers (or why it has none) and
    /// the project files its import loaded. An `Err` is a call that did not finish.
    /// `files`: the `.py` files under `routes/` (path relative to it, source), for an
    /// instance that cannot open `/routes` (see `wit/filerouter.wit`); empty to read them there.
    pub async fn inspect_route(
        &self,
        file: &str,
        files: &[(String, String)],
    ) -> Result<RouteInspection, SandboxError> {
        let label = format!("inspecting routes/{file}");
        let file = file.to_string();
        let files = files.to_vec();
        let mut inspection = self
            .call(Purpose::Tooling, label, move |router, store| {
                Box::pin(async move {
                    router
                        .filerouter_sandbox_guest()
                        .call_inspect_route(store, &file, &files)
                        .await
                        .map(Ok)
                })
            })
            .await?;
        if let Err(error) = inspection.handlers {
            inspection.handlers = Err(redacted(&self.inner.declared, error));
        }
        Ok(inspection)
    }

    /// Evaluate `config.py`'s source in the guest; the settings come back as JSON text.
    pub async fn load_config(&self, source: &str) -> Result<String, SandboxError> {
        let source = source.to_string();
        self.call(
            Purpose::Tooling,
            "config.py".into(),
            move |router, store| {
                Box::pin(async move {
                    router
                        .filerouter_sandbox_guest()
                        .call_load_config(store, &source)
                        .await
                })
            },
        )
        .await
    }

    /// Wait for a turn in the queue `purpose` calls for, then make a fresh store and instance
    /// on a guest thread, run `export` in it under the limits, and map the outcome. What the
    /// guest prints is logged afterwards under `label` (see [`output`]).
    async fn call<T, F>(
        &self,
        purpose: Purpose,
        label: String,
        export: F,
    ) -> Result<T, SandboxError>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(bindings::Router, &'a mut Store<CallState>) -> ExportFuture<'a, T>
            + Send
            + 'static,
    {
        let purpose_name = purpose.name();
        let (queue, time) = match purpose {
            Purpose::Request(_) => (self.inner.queue.clone(), self.inner.limits.time()),
            Purpose::Tooling => (self.inner.queue.scheduler().tooling(), TOOLING_TIME),
            Purpose::Snapshot(_) => (
                self.inner.queue.scheduler().tooling(),
                live_snapshot::SNAPSHOT_TIME,
            ),
            Purpose::Compile(_) => (self.inner.queue.scheduler().tooling(), MIGRATION_TIME),
            Purpose::Migration(_) => {
                let request = self.inner.limits.time();
                let time = TimeLimits {
                    cpu: request.cpu.max(MIGRATION_TIME.cpu),
                    wall: request.wall.max(MIGRATION_TIME.wall),
                };
                (self.inner.queue.scheduler().tooling(), time)
            }
            Purpose::Startup => {
                let request = self.inner.limits.time();
                let time = TimeLimits {
                    cpu: request.cpu.max(TOOLING_TIME.cpu),
                    wall: request.wall.max(TOOLING_TIME.wall),
                };
                (self.inner.queue.scheduler().tooling(), time)
            }
        };
        let (environment, outbound) = match purpose {
            Purpose::Request(_) | Purpose::Startup | Purpose::Migration(_) => (
                self.inner.environment.clone(),
                Some(self.inner.outbound.clone()),
            ),
            Purpose::Tooling | Purpose::Snapshot(_) | Purpose::Compile(_) => {
                (self.inner.declared.clone(), None)
            }
        };
        let (watch, staged, tap) = match purpose {
            Purpose::Snapshot(watch) => (Some(watch), None, None),
            Purpose::Migration(staged) | Purpose::Compile(staged) => (None, Some(staged), None),
            Purpose::Request(tap) => (None, None, tap),
            _ => (None, None, None),
        };
        // The request's trace, while traces are exported: its wait for a turn, and its call.
        let parent = crate::traces::current();
        let waiting = parent.as_ref().map(|_| std::time::SystemTime::now());
        let turn = queue.turn().await;
        if let (Some(parent), Some(from)) = (&parent, waiting) {
            crate::traces::record(parent, "queue wait", from, std::time::SystemTime::now());
        }
        let turn = turn.map_err(SandboxError::Busy)?;
        let trace = parent
            .as_ref()
            .and_then(|parent| crate::traces::CallTrace::start(parent, purpose_name));
        let inner = self.inner.clone();
        match turn
            .run(time, move |budget| {
                inner.instantiate_and_call(
                    budget,
                    environment,
                    outbound,
                    (watch, staged, tap),
                    (label, trace),
                    export,
                )
            })
            .await
        {
            Ok(result) => result,
            // A guest blocked in a host call (a long `time.sleep`) never reaches an epoch
            // check: the scheduler's wall-clock watch drops the whole call, instance and all.
            Err(Stopped::Overrun(overrun)) => Err(SandboxError::Timeout(overrun)),
            Err(Stopped::Lost) => Err(SandboxError::Trap(
                "the call was lost (the server is stopping)".into(),
            )),
        }
    }
}

/// Logs what the guest printed when the call ends, with the operator's values redacted.
struct EmitOnDrop {
    output: output::GuestOutput,
    label: String,
    environment: Environment,
}

impl Drop for EmitOnDrop {
    fn drop(&mut self) {
        self.output
            .emit(&self.label, |line| self.environment.redact(line));
    }
}

impl Inner {
    /// On a guest thread: a fresh store and instance, `export` called in it. With `watch`, a
    /// live snapshot's call: no files, and the memory watched.
    #[allow(clippy::too_many_arguments)]
    async fn instantiate_and_call<T, F>(
        self: Arc<Self>,
        budget: Budget,
        environment: Environment,
        outbound: Option<Arc<crate::outbound::Gate>>,
        (watch, staged, tap): (
            Option<Arc<slots::MemoryWatch>>,
            Option<Arc<Staged>>,
            Option<crate::replay::Tap>,
        ),
        (label, trace): (String, Option<crate::traces::CallTrace>),
        export: F,
    ) -> Result<T, SandboxError>
    where
        F: for<'a> FnOnce(bindings::Router, &'a mut Store<CallState>) -> ExportFuture<'a, T>,
    {
        let limits = &self.limits;
        let _slot = self.guest.engine().slot().await;
        let mut wasi = WasiCtxBuilder::new();
        // A snapshot sees no files, as a build's bake does: a descriptor it opened would be
        // in the memory every later instance starts from.
        if let Some(dir) = self.routes_dir.as_ref().filter(|_| watch.is_none()) {
            wasi.preopened_dir(dir, "/routes", FsPerms::ReadOnly)
                .map_err(|e| SandboxError::Setup(format!("open {}: {e}", dir.display())))?;
            // The project's own packages (`filerouter packages install`), read-only.
            if let Some(packages) = crate::packages::mounted(dir) {
                wasi.preopened_dir(&packages, "/packages", FsPerms::ReadOnly)
                    .map_err(|e| {
                        SandboxError::Setup(format!("open {}: {e}", packages.display()))
                    })?;
            }
        }
        if let Some(staged) = &staged {
            let perms = if staged.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&staged.dir, staged.at, perms)
                .map_err(|e| SandboxError::Setup(format!("open {}: {e}", staged.dir.display())))?;
        }
        let output = output::GuestOutput::default();
        wasi.stdout(output.clone()).stderr(output.clone());
        // Recorded or replayed: the clocks and randomness go through the tape.
        if let Some(tap) = &tap {
            tap.configure(&mut wasi);
        }
        // Printed when the call ends, however it ends (a call past its wall-clock limit is
        // dropped where it waits).
        let _emit = EmitOnDrop {
            output: output.clone(),
            label,
            environment: environment.clone(),
        };
        // Plugins run in stores of their own under this call's budget: their CPU is counted
        // in this call's (they run in its polls) and their epoch ticks ask the same budget.
        let deadline = Instant::now() + limits.wall;
        let mut memory = MemoryLimiter::for_guest(limits.memory_bytes, self.guest.image().clone());
        if let Some(watch) = &watch {
            memory = memory.watched(watch.clone());
        }
        // A snapshot imports with no project database (only the warm-up's private `:memory:`
        // ones) and a throwaway key-value store, as a build's bake does: a connection opened
        // at import time would be in every later instance's memory, stale (the import fails
        // instead, and `dev` serves that project from source).
        let throwaway = watch.is_some().then(Data::for_build);
        let data = throwaway.as_ref().unwrap_or(&self.data);
        let mut state = CallState::new(wasi.build(), memory, data, deadline);
        if watch.is_some() {
            state.immortal = Some(Vec::new());
        }
        state.plugins = self.plugins.as_ref().map(|plugins| {
            plugins.open(PluginCall {
                memory: state.limits.share(),
                deadline,
                kv: data.kv.clone(),
                time: Some(budget.clone()),
                output: Some(output.clone()),
            })
        });
        state.budget = Some(budget.clone());
        state.db.set_budget(budget.clone());
        // A guest thread of the scheduler, not an async one: reads may run here.
        state.db.run_reads_here();
        state.environment = environment.clone();
        state.outbound = outbound.map(|gate| gate.session(deadline));
        state.trace = trace;
        state.tap = tap;
        let mut store = Store::new(self.guest.engine().engine(), state);
        store.limiter(|state| &mut state.limits);

        // At every epoch tick the scheduler's budget decides: go on, let a poorer tenant's
        // call have the thread for a while, or stop past the CPU (or wall) limit.
        store.set_epoch_deadline(1);
        let ticks = budget.clone();
        store.epoch_deadline_callback(move |_| Ok(at_epoch_tick(ticks.tick())));

        let instantiated = self.pre.instantiate_async(&mut store).await;
        // The image announced for the memory was taken by it, unless instantiating failed first.
        slots::clear_announcement();
        let router = instantiated.map_err(|e| match budget.overrun() {
            Some(overrun) => SandboxError::Timeout(overrun),
            None => SandboxError::Instantiate(format!("{e:#}")),
        })?;
        match export(router, &mut store).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(SandboxError::Project(Box::new(redacted(
                &environment,
                error,
            )))),
            Err(trap) => {
                let refused = store.data().limits.refused();
                Err(guest::classify_trap(trap, limits, &budget, refused))
            }
        }
    }
}

/// A taped call's tap until the call ends; dropped first, the call was abandoned where it was
/// (its client closed the connection): the tape ends as [`crate::replay::Outcome::client_closed`].
struct Unfinished(Option<crate::replay::Tap>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(tap) = self.0.take() {
            tap.finish(crate::replay::Outcome::client_closed());
        }
    }
}

/// A request as a trace keeps it.
fn tape_request(request: &HttpRequest) -> crate::replay::tape::Request {
    crate::replay::tape::Request {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        headers: request.headers.clone(),
        body: crate::replay::tape::Bytes(request.body.clone()),
        client: request.client.clone(),
    }
}

/// How a request's call ended, as a trace keeps it: the status is the one the server answers
/// with (`crate::router`'s: 504 past a time limit, 503 when its queue was full, else 500).
pub fn tape_outcome(outcome: &Result<HttpResponse, SandboxError>) -> crate::replay::Outcome {
    use crate::replay::Outcome;
    match outcome {
        Ok(response) => Outcome::response(response.status, &response.body),
        Err(error) => {
            let (status, kind) = match error {
                SandboxError::Project(_) => (500, "Project"),
                SandboxError::Timeout(_) => (504, "Timeout"),
                SandboxError::Busy(_) => (503, "Busy"),
                SandboxError::MemoryCap(_) => (500, "MemoryCap"),
                SandboxError::Trap(_) => (500, "Trap"),
                SandboxError::StackExhausted(_) => (500, "StackExhausted"),
                SandboxError::Exited(_) => (500, "Exited"),
                SandboxError::Instantiate(_) => (500, "Instantiate"),
                SandboxError::Setup(_) => (500, "Setup"),
            };
            let (message, file, line) = match error {
                SandboxError::Project(project) => (
                    format!("{}: {}", project.kind, project.message),
                    project.file.clone(),
                    project.line,
                ),
                other => (other.to_string(), None, None),
            };
            Outcome::Failed {
                status,
                error: kind.into(),
                message,
                file,
                line,
            }
        }
    }
}

/// `error` with the operator's values replaced wherever project code could have put them: the
/// message, the traceback and the suggestions (the error page and the log show them).
fn redacted(environment: &Environment, mut error: ProjectError) -> ProjectError {
    if environment.values().is_empty() {
        return error;
    }
    error.message = environment.redact(&error.message).into_owned();
    error.traceback = environment.redact(&error.traceback).into_owned();
    for suggestion in &mut error.suggestions {
        *suggestion = environment.redact(suggestion).into_owned();
    }
    error
}

/// What a store's epoch callback tells wasmtime for the scheduler's verdict at a tick: the
/// same for route instances and plugin instances.
pub(crate) fn at_epoch_tick(verdict: Verdict) -> UpdateDeadline {
    match verdict {
        Verdict::Continue => UpdateDeadline::Continue(1),
        Verdict::Yield => UpdateDeadline::Yield(1),
        Verdict::Stop => UpdateDeadline::Interrupt,
    }
}
