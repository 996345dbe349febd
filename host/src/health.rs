//! Whether this `run` process is alive and ready to serve, for a load balancer's or
//! Kubernetes' probes: `/livez` and `/readyz` on the admin address (`crate::admin`), and
//! readiness on the public port under `--health-path` (`crate::server`).
//!
//! Alive: the process answers at all. Ready: the build is loaded and its start-up hook ran
//! (the migrations were checked then: `run` does not start behind them), the process is not
//! draining, and the project's backends answer now (a Postgres `SELECT 1` and a kv read, each
//! within [`BACKEND_TIMEOUT`]). On SIGTERM the server turns readiness off at once
//! ([`Health::drain`]) and keeps serving for the drain delay, so that the load balancer stops
//! sending before the process stops accepting. Not here: the signal handling and the drain
//! itself (`crate::server`), what the backends are (`crate::data`).

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering::SeqCst},
    },
    time::Duration,
};

/// How long each backend may take to answer a readiness probe.
pub const BACKEND_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks the project's backends whether they answer; `Err` names the one that did not.
pub type BackendCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// The answer to a readiness probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Still loading (the build, the migrations' check, the start-up hook).
    Starting,
    /// SIGTERM came: the process is finishing its requests.
    Draining,
    /// A backend does not answer (which one, and why).
    BackendDown(String),
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        *self == Readiness::Ready
    }

    /// The JSON body of a probe's answer.
    pub fn body(&self) -> String {
        let (status, detail) = match self {
            Readiness::Ready => ("ready", None),
            Readiness::Starting => ("starting", None),
            Readiness::Draining => ("draining", None),
            Readiness::BackendDown(why) => ("unavailable", Some(why.as_str())),
        };
        match detail {
            Some(detail) => serde_json::json!({ "status": status, "detail": detail }),
            None => serde_json::json!({ "status": status }),
        }
        .to_string()
    }
}

/// The process's health; cheap to clone, shared by the server and the admin address.
#[derive(Clone, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    loaded: AtomicBool,
    draining: AtomicBool,
    backends: OnceLock<BackendCheck>,
}

impl Health {
    /// The build is loaded and the start-up hook ran: ready once the backends answer.
    pub fn loaded(&self) {
        self.inner.loaded.store(true, SeqCst);
    }

    /// Ask `check` on every readiness probe (set once, before [`Health::loaded`]).
    pub fn check_backends<F, Fut>(&self, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let boxed: BackendCheck = Arc::new(move || {
            let answer: Pin<Box<dyn Future<Output = Result<(), String>> + Send>> =
                Box::pin(check());
            answer
        });
        let _ = self.inner.backends.set(boxed);
    }

    /// SIGTERM came: not ready from now on.
    pub fn drain(&self) {
        self.inner.draining.store(true, SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(SeqCst)
    }

    /// Whether the process is ready now (asks the backends).
    pub async fn readiness(&self) -> Readiness {
        if self.inner.draining.load(SeqCst) {
            return Readiness::Draining;
        }
        if !self.inner.loaded.load(SeqCst) {
            return Readiness::Starting;
        }
        if let Some(check) = self.inner.backends.get() {
            match tokio::time::timeout(BACKEND_TIMEOUT * 2, check()).await {
                Ok(Ok(())) => {}
                Ok(Err(why)) => return Readiness::BackendDown(why),
                Err(_) => {
                    return Readiness::BackendDown(format!(
                        "the backends did not answer within {:?}",
                        BACKEND_TIMEOUT * 2
                    ));
                }
            }
        }
        // Draining may have begun while the backends were asked.
        if self.inner.draining.load(SeqCst) {
            return Readiness::Draining;
        }
        Readiness::Ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_only_once_loaded_with_backends_up_and_not_draining() {
        let health = Health::default();
        assert_eq!(health.readiness().await, Readiness::Starting);
        let up = Arc::new(AtomicBool::new(false));
        let seen = up.clone();
        health.check_backends(move || {
            let up = seen.load(SeqCst);
            async move {
                if up {
                    Ok(())
                } else {
                    Err("postgres: refused".to_string())
                }
            }
        });
        health.loaded();
        assert_eq!(
            health.readiness().await,
            Readiness::BackendDown("postgres: refused".into())
        );
        up.store(true, SeqCst);
        assert!(health.readiness().await.is_ready());
        health.drain();
        assert_eq!(health.readiness().await, Readiness::Draining);
        assert_eq!(health.readiness().await.body(), r#"{"status":"draining"}"#);
    }
}
