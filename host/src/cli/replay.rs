//! `filerouter replay TRACE`: run a recorded request again (`crate::replay`), on the build it
//! was recorded on, with the recorded answers served instead of the real services, and show
//! the result as `dev` does: the exception with its file and line and the traceback, or the
//! response; the guest's output on stderr as it comes. A run that asks anything the trace does
//! not hold stops at the first divergence, which is named. `--source` runs the project's
//! current source instead of the build (a warning says so), to try a fix against a real
//! failure.
//!
//! A streamed response shows its head's status and each chunk it wrote, in order; a WebSocket
//! session each message it sent (`>`), and its close; `--body` writes a stream's body.
//! A trace recorded by `dev` (on the source, not a build) replays on the current source.
//! A trace whose client closed first (499) is reproduced when the run asks what was recorded
//! up to where the client left (it is stopped at its next host call there).
//!
//! Exit status: 0 when the replay reproduced the recorded outcome (same status, same body or
//! the same exception at the same line, the same chunks or messages), 1 when it did not or
//! diverged, 2 when it could not run (no build, another build, a bad trace file).

use std::{process::ExitCode, sync::Arc};

use anyhow::Context;

use super::ReplayArgs;
use crate::{
    cache::CacheKey,
    data::Data,
    environment::Environment,
    logging,
    mode::Mode,
    project::Project,
    replay::{Outcome, Replaying, Sent, Tape, recording::DEV_BUNDLE},
    sandbox::{HttpResponse, Limits, Sandbox, SandboxError, engine::SandboxEngine},
    scheduler::Scheduler,
    tenants,
};

/// The largest trace file read.
const MAX_TRACE_BYTES: u64 = crate::replay::store::MAX_TRACE_FILE_BYTES;

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    match prepare_and_replay(args) {
        Ok(code) => Ok(code),
        Err(error) => {
            eprintln!("error: {error:#}");
            Ok(ExitCode::from(2))
        }
    }
}

fn prepare_and_replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let text = crate::regular_file::read(&args.trace, MAX_TRACE_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read the trace {}: {e}", args.trace.display()))?;
    let tape =
        Tape::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.trace.display()))?;
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    let dir = super::cache_dir(&root, args.cache_dir.as_deref())?;
    let runtime = super::runtime()?;
    let result = runtime.block_on(replay(args, root, dir, tape));
    runtime.shutdown_timeout(super::ABANDON_AFTER);
    result
}

async fn replay(
    args: ReplayArgs,
    root: std::path::PathBuf,
    dir: std::path::PathBuf,
    tape: Tape,
) -> anyhow::Result<ExitCode> {
    logging::init(Mode::Development, None);
    println!(
        "filerouter replay: trace {} ({} {}{}, recorded {}{}): {}",
        tape.id,
        tape.request.method,
        tape.request.path,
        if tape.request.query.is_empty() {
            String::new()
        } else {
            format!("?{}", tape.request.query)
        },
        tape.recorded_at,
        tape.tenant
            .as_ref()
            .map_or(String::new(), |tenant| format!(", tenant {tenant}")),
        tape.outcome.describe(),
    );
    if tape.truncated {
        println!(
            "filerouter replay: warning: the trace was cut at its size bound; the replay stops where it ends"
        );
    }
    let scheduler = Scheduler::new(1);
    // Recorded by `dev`: there is no build to run, only the source.
    let source = args.source || tape.bundle == DEV_BUNDLE;
    if source && !args.source {
        println!(
            "filerouter replay: the trace was recorded by `dev`, on the source: replaying on the current source"
        );
    }
    let (sandbox, root_files) = if source {
        println!(
            "filerouter replay: warning: running the current source of {}, not the build the trace was recorded on (build {}): a changed route shows as a divergence",
            root.display(),
            short(&tape.bundle)
        );
        from_source(&root, &scheduler).await?
    } else {
        from_build(&root, &dir, &tape, &scheduler).await?
    };
    let replaying = Replaying::new(tape, source).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (outcome, answered) = sandbox.replay(replaying.clone(), &root_files).await;
    let recorded = &replaying.tape().outcome;
    let divergence = replaying.divergence().or_else(|| replaying.unasked());
    // A divergence stopped the run: its trap says no more than the divergence does.
    if replaying.divergence().is_none() {
        match &outcome {
            Outcome::Streamed { .. } | Outcome::Socket { .. } => {
                show_frames(&replaying.frames(), &args)?;
            }
            _ => show(&answered, &args)?,
        }
    }
    if let Some(divergence) = divergence {
        println!("filerouter replay: {divergence}");
        println!("filerouter replay: not reproduced");
        return Ok(ExitCode::from(1));
    }
    if let Some(call) = replaying.stopped_where_client_left() {
        println!(
            "filerouter replay: reproduced: {} (the run asked what was recorded; stopped at call {call}, where the client had left)",
            recorded.describe()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if same(&outcome, recorded) {
        println!(
            "filerouter replay: reproduced: {} ({} host calls answered from the trace)",
            outcome.describe(),
            replaying.calls_answered()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "filerouter replay: not reproduced: recorded {}, replayed {}",
            recorded.describe(),
            outcome.describe()
        );
        Ok(ExitCode::from(1))
    }
}

/// Whether a replay's outcome is the recorded one: the same response bytes, or the same
/// failure at the same place.
fn same(replayed: &Outcome, recorded: &Outcome) -> bool {
    match (replayed, recorded) {
        (
            Outcome::Failed {
                status,
                error,
                message,
                file,
                line,
            },
            Outcome::Failed {
                status: s,
                error: e,
                message: m,
                file: f,
                line: l,
            },
        ) => {
            // A limit's message names the time measured, which differs run to run.
            status == s
                && error == e
                && file == f
                && line == l
                && (error == "Timeout" || message == m)
        }
        (a, b) => a == b,
    }
}

fn short(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

/// The build in `dir`, refused unless it is the one the trace was recorded on.
async fn from_build(
    root: &std::path::Path,
    dir: &std::path::Path,
    tape: &Tape,
    scheduler: &Scheduler,
) -> anyhow::Result<(Sandbox, Vec<(String, String)>)> {
    let key = CacheKey::from_env()?;
    let dir = dir.to_path_buf();
    let (opened, _) = tokio::task::spawn_blocking(move || tenants::load::open(&dir, key.as_ref()))
        .await
        .context("reading the cache panicked")??;
    if opened.bundle_blake3 != tape.bundle {
        anyhow::bail!(
            "the trace was recorded on build {} but the build here is {} (made {}): replay needs the same build (`--source` runs the current source instead)",
            short(&tape.bundle),
            short(&opened.bundle_blake3),
            opened.manifest.created_at
        );
    }
    let queue = scheduler.queue("replay", opened.metadata.settings.server.queue_config(1));
    let root = root.to_path_buf();
    let loaded = tokio::task::spawn_blocking(move || {
        let engine = SandboxEngine::new(1)?;
        tenants::load::serve_from(
            &engine,
            &root,
            &opened,
            None,
            |settings| settings.limits(),
            // Never used: every outbound call is answered from the trace.
            |_| Ok(Arc::new(crate::outbound::Gate::closed())),
            Data::default(),
            queue,
            Environment::default(),
        )
        .map_err(anyhow::Error::from)
    })
    .await
    .context("engine setup panicked")??;
    let current = loaded.app.current();
    Ok((
        current.sandbox.clone(),
        current.project.root_files.sources().to_vec(),
    ))
}

/// The project's current source, loaded as `dev` loads it.
async fn from_source(
    root: &std::path::Path,
    scheduler: &Scheduler,
) -> anyhow::Result<(Sandbox, Vec<(String, String)>)> {
    let routes_dir = Project::routes_dir(root);
    let engine = tokio::task::spawn_blocking(|| SandboxEngine::load(1))
        .await
        .context("engine setup panicked")??;
    let boot = Sandbox::new(engine.clone(), None, Limits::default(), scheduler.tooling())?;
    let settings = boot.load_settings(root).await?;
    drop(boot);
    let queue = scheduler.queue("replay", settings.server.queue_config(1));
    let sandbox = Sandbox::with_data(
        engine,
        Some(&routes_dir),
        settings.limits(),
        Data::default(),
        queue,
    )?;
    let project = Project::load(root, &sandbox, None, None).await;
    let root_files = project.root_files.sources().to_vec();
    Ok((sandbox, root_files))
}

/// What a replayed stream or WebSocket session sent, in order: a stream's chunks (as text
/// when they are UTF-8), a session's messages (`>`) and its close.
fn show_frames(frames: &[Sent], args: &ReplayArgs) -> anyhow::Result<()> {
    let mut body = Vec::new();
    for frame in frames {
        match frame {
            Sent::StreamStarted(status) => println!("streamed response: {status}"),
            Sent::Chunk(bytes) => {
                body.extend_from_slice(bytes);
                println!(
                    "chunk {} bytes: {:?}",
                    bytes.len(),
                    String::from_utf8_lossy(bytes)
                );
            }
            Sent::Accepted => println!("websocket: accepted (101)"),
            Sent::Text(text) => println!("> {text}"),
            Sent::Binary(bytes) => println!("> binary, {} bytes", bytes.len()),
            Sent::Close(code, reason) => println!("websocket: closed with {code} {reason:?}"),
        }
    }
    if let Some(file) = &args.body {
        std::fs::write(file, &body).with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}

/// The replayed result, as `dev` shows it: the exception (kind, message, file and line,
/// suggestions, traceback), or the response (status, headers, body).
fn show(answered: &Result<HttpResponse, SandboxError>, args: &ReplayArgs) -> anyhow::Result<()> {
    match answered {
        Err(SandboxError::Project(project)) => {
            let failure = crate::error_page::Failure::from_project(project);
            let location = failure.location();
            let at = if location.is_empty() {
                String::new()
            } else {
                format!(" at {location}")
            };
            println!("{}: {}{at}", failure.kind, failure.message);
            for suggestion in &failure.suggestions {
                println!("  hint: {suggestion}");
            }
            if !failure.details.is_empty() {
                println!("{}", failure.details.trim_end());
            }
        }
        Err(other) => println!("{other}"),
        Ok(response) => {
            println!("response: {}", response.status);
            for (name, value) in &response.headers {
                println!("{name}: {value}");
            }
            println!();
            println!("{}", String::from_utf8_lossy(&response.body));
        }
    }
    if let Some(file) = &args.body {
        let body = match answered {
            Ok(response) => response.body.as_slice(),
            Err(_) => &[],
        };
        std::fs::write(file, body).with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}
