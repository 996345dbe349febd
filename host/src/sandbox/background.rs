//! Background tasks (`filerouter.BackgroundTasks`): what is left of a request's call after its
//! response went out.
//!
//! A handler that added tasks makes the guest hand its response to the host before the call
//! ends (`background.respond` in `wit/filerouter.wit`); [`super::Sandbox::handle`] answers with
//! it at once and the call goes on, in the same instance, under the same limits (its CPU and
//! wall-clock budget, its memory cap, its database session and deadline), in a task of its
//! own ([`spawn`]). The response is never changed by how the call ends: a task that raised, a
//! task stopped at a limit, a trap are logged ([`ended`]), with the request's label and the
//! traceback. The instance stays the request's (it counts against `server.workers`) until the
//! tasks are done. A stopping server waits for them within its drain time ([`drained`]).

use std::future::Future;

use super::{HttpResponse, SandboxError, lingering::Lingering};
use crate::scheduler::Limit;

/// Calls still running their background tasks, in this process.
static RUNNING: Lingering = Lingering::new();

/// How many requests are still running background tasks.
pub fn running() -> usize {
    RUNNING.running()
}

/// Resolves once no request is running background tasks (at once if none is).
pub async fn drained() {
    RUNNING.drained().await;
}

/// Let `call`, whose response was sent already, finish in a task of its own; log how it ends.
pub fn spawn<F>(label: String, call: F)
where
    F: Future<Output = Result<HttpResponse, SandboxError>> + Send + 'static,
{
    let running = RUNNING.enter();
    tokio::spawn(async move {
        let _running = running;
        let outcome = call.await;
        ended(&label, outcome);
    });
}

/// Log how the background part of request `label`'s call ended (its response was sent).
pub fn ended(label: &str, outcome: Result<HttpResponse, SandboxError>) {
    match outcome {
        Ok(_) => tracing::debug!("{label}: background tasks done"),
        Err(SandboxError::Project(error)) => {
            let at = error.at();
            tracing::error!(
                "{label}: a background task failed (the response was sent already; the tasks after it did not run): {}: {}{at}\n{}",
                error.kind,
                error.message,
                error.traceback.trim_end()
            );
        }
        Err(SandboxError::Timeout(overrun)) => {
            let setting = match overrun.limit {
                Limit::Cpu => "cpu_ms",
                Limit::Wall => "wall_s",
            };
            tracing::error!(
                "{label}: background tasks stopped (the response was sent already): {overrun}; the request's limits count its background tasks too (`sandbox = {{\"{setting}\": ...}}` in config.py)"
            );
        }
        Err(error) => tracing::error!(
            "{label}: background tasks stopped (the response was sent already): {error}"
        ),
    }
}
