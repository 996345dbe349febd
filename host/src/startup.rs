//! The project's start-up hook: `startup()` in `startup.py` at the project root, run when the
//! server starts (FastAPI's `lifespan` and `@app.on_event("startup")`, Next.js's
//! `instrumentation.ts` `register()`), for example to seed data or check settings.
//!
//! Where it runs, each time in a fresh instance of its own with the project's real data and
//! the operator's values of `filerouter.env`: `dev`, at start and after every reload, where a
//! failure is the error page of every request (naming the file and line) until a reload where
//! it succeeds; `run`, once at start, before it listens, where a failure stops `run` with the
//! file and line; `run --tenants`, whenever a tenant is loaded, where a failure refuses the
//! tenant's requests (503) until it is loaded again. `build` only imports `startup.py` into the
//! snapshot and checks that it defines `startup()` (a failure is a build error naming the file
//! and line): the build has neither the data nor the values the hook is for, and nothing the
//! hook does belongs in the snapshot.

use hyper::StatusCode;

use crate::{
    error_page::Failure,
    project::RootFiles,
    sandbox::{Sandbox, SandboxError},
};

/// The hook's file, at the project root.
pub const FILE: &str = "startup.py";

/// The kind of the failure every request shows in `dev` while the hook fails.
pub const STARTUP_ERROR: &str = "StartupError";

/// Run the hook if the project has one (`root_files` says; their sources in `dev`, none for a
/// build). `Ok(false)`: there is none.
pub async fn run(sandbox: &Sandbox, root_files: &RootFiles) -> Result<bool, SandboxError> {
    if !root_files.has(FILE) {
        return Ok(false);
    }
    sandbox.startup(root_files.sources()).await
}

/// `dev`: run the hook; the failure every request shows while it fails, logged once here.
pub async fn failure(sandbox: &Sandbox, root_files: &RootFiles) -> Option<Failure> {
    match run(sandbox, root_files).await {
        Ok(true) => {
            tracing::info!("{FILE}: startup() ran");
            None
        }
        Ok(false) => None,
        Err(error) => {
            let failure = failure_of(error);
            log(&failure);
            Some(failure)
        }
    }
}

/// The failure of a hook that did not finish, as the error page shows it: the hook's file and
/// line, its project frames and traceback.
pub fn failure_of(error: SandboxError) -> Failure {
    let mut failure = match error {
        SandboxError::Project(error) => {
            let mut failure = Failure::from_project(&error);
            // The framework's own finding (no `startup` to call) says what it is already.
            if error.kind != "ProjectCodeError" {
                failure.message = format!("startup() raised {}: {}", error.kind, error.message);
            }
            failure
        }
        other => {
            let mut failure = Failure::simple(
                StatusCode::INTERNAL_SERVER_ERROR,
                STARTUP_ERROR,
                &format!("startup() did not finish: {other}"),
                Vec::new(),
            );
            failure.file = Some(FILE.into());
            failure
        }
    };
    failure.kind = STARTUP_ERROR.into();
    failure.status = StatusCode::INTERNAL_SERVER_ERROR;
    if failure.file.is_none() {
        failure.file = Some(FILE.into());
    }
    failure.suggestions.push(format!(
        "{FILE} runs when the server starts and after every reload: fix it, and the server runs it again by itself"
    ));
    failure
}

/// One line for the terminal or an error message: `startup.py:4: StartupError: startup()
/// raised RuntimeError: ...`.
pub fn describe(failure: &Failure) -> String {
    let at = match (&failure.file, failure.line) {
        (Some(file), Some(line)) => format!("{file}:{line}: "),
        (Some(file), None) => format!("{file}: "),
        _ => String::new(),
    };
    format!("{at}{}: {}", failure.kind, failure.message)
}

/// Log a failed hook: its line, then its traceback.
pub fn log(failure: &Failure) {
    if failure.details.trim().is_empty() {
        tracing::error!("{}", describe(failure));
    } else {
        tracing::error!("{}\n{}", describe(failure), failure.details.trim_end());
    }
}
