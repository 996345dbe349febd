//! What one request was and cost, gathered while it is answered: the route pattern that
//! matched, the tenant, the time its call waited in the scheduler's queue, the CPU its guest
//! used, the sandbox limit that stopped it, and the time its database statements took.
//!
//! The server opens a [`Record`] around each request ([`scope`]); the modules that learn these
//! facts on the way (the router, the tenants, the scheduler) write them with the free
//! functions here, which do nothing outside a scope (`dev`'s tooling calls, a stream's
//! background work). The server then hands the record to the access line and the metrics.
//! Not here: what is done with the record (`crate::access_log`, `crate::metrics`). This module
//! imports nothing of the crate, so that every layer may write to it.

use std::{
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

/// The label of a request no route file matched (static files, `/docs`, 404s, redirects):
/// one fixed value, so that raw paths never become metric labels.
pub const UNMATCHED: &str = "unmatched";

/// One request's record; the server keeps one handle, the request's task another.
#[derive(Debug, Default)]
pub struct Record {
    named: Mutex<Named>,
    queue_wait_ns: AtomicU64,
    cpu_ns: AtomicU64,
    db_ns: AtomicU64,
    db_calls: AtomicU64,
}

#[derive(Debug, Default, Clone)]
struct Named {
    route: Option<Arc<str>>,
    tenant: Option<Arc<str>>,
    limit: Option<&'static str>,
}

impl Record {
    /// The route pattern that matched (`/users/{id}`), else [`UNMATCHED`].
    pub fn route(&self) -> Arc<str> {
        self.named().route.unwrap_or_else(|| Arc::from(UNMATCHED))
    }

    /// The tenant the request went to (`run --tenants`), if any.
    pub fn tenant(&self) -> Option<Arc<str>> {
        self.named().tenant
    }

    /// The sandbox limit that stopped the request (`cpu`, `wall`, `memory`, `queue`), if any.
    pub fn limit(&self) -> Option<&'static str> {
        self.named().limit
    }

    /// Time its guest calls waited for a turn in the scheduler's queue.
    pub fn queue_wait(&self) -> Duration {
        Duration::from_nanos(self.queue_wait_ns.load(Relaxed))
    }

    /// CPU its guest calls used (with the host work charged to them).
    pub fn cpu(&self) -> Duration {
        Duration::from_nanos(self.cpu_ns.load(Relaxed))
    }

    /// Whether a guest call ran for it (else the host answered alone).
    pub fn ran_guest(&self) -> bool {
        self.cpu_ns.load(Relaxed) > 0 || self.queue_wait_ns.load(Relaxed) > 0
    }

    /// Database statements it ran, and the time they took together.
    pub fn db(&self) -> (u64, Duration) {
        (
            self.db_calls.load(Relaxed),
            Duration::from_nanos(self.db_ns.load(Relaxed)),
        )
    }

    fn named(&self) -> Named {
        self.named.lock().map(|n| n.clone()).unwrap_or_default()
    }

    fn name(&self, set: impl FnOnce(&mut Named)) {
        if let Ok(mut named) = self.named.lock() {
            set(&mut named);
        }
    }
}

tokio::task_local! {
    static CURRENT: Arc<Record>;
}

/// Run `future` (one request) with `record` as the record its writers fill.
pub async fn scope<F: Future>(record: Arc<Record>, future: F) -> F::Output {
    CURRENT.scope(record, future).await
}

fn with(write: impl FnOnce(&Record)) {
    let _ = CURRENT.try_with(|record| write(record));
}

/// The route pattern that matched the request.
pub fn set_route(pattern: Arc<str>) {
    with(|r| r.name(|n| n.route = Some(pattern)));
}

/// The tenant the request goes to.
pub fn set_tenant(name: Arc<str>) {
    with(|r| r.name(|n| n.tenant = Some(name)));
}

/// The sandbox limit that stopped the request.
pub fn set_limit(limit: &'static str) {
    with(|r| r.name(|n| n.limit = Some(limit)));
}

/// A guest call waited `waited` for its turn.
pub fn add_queue_wait(waited: Duration) {
    let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
    with(|r| {
        r.queue_wait_ns.fetch_add(ns, Relaxed);
    });
}

/// A guest call used `used` of CPU.
pub fn add_cpu(used: Duration) {
    // At least 1 ns, so that a call that ran is told from none.
    let ns = u64::try_from(used.as_nanos()).unwrap_or(u64::MAX).max(1);
    with(|r| {
        r.cpu_ns.fetch_add(ns, Relaxed);
    });
}

/// A database statement took `took`.
pub fn add_db_call(took: Duration) {
    let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
    with(|r| {
        r.db_ns.fetch_add(ns, Relaxed);
        r.db_calls.fetch_add(1, Relaxed);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writers_fill_the_record_of_their_scope_and_nothing_outside_one() {
        add_cpu(Duration::from_millis(5));
        let record = Arc::new(Record::default());
        scope(record.clone(), async {
            set_route(Arc::from("/users/{id}"));
            add_cpu(Duration::from_millis(2));
            add_cpu(Duration::from_millis(3));
            add_queue_wait(Duration::from_millis(1));
            add_db_call(Duration::from_micros(10));
            set_limit("cpu");
        })
        .await;
        assert_eq!(&*record.route(), "/users/{id}");
        assert_eq!(record.cpu(), Duration::from_millis(5));
        assert_eq!(record.queue_wait(), Duration::from_millis(1));
        assert_eq!(record.db(), (1, Duration::from_micros(10)));
        assert_eq!(record.limit(), Some("cpu"));
        assert!(record.ran_guest());
        let empty = Record::default();
        assert_eq!(&*empty.route(), UNMATCHED);
        assert!(!empty.ran_guest());
    }
}
