//! Snapshots of a live instance, for `filerouter dev`: the project imported once, its memory
//! copied out, and later calls started from that copy, as `run`'s start from a build's.
//!
//! `build` snapshots through component-init-transform ([`super::snapshot`]), which instruments
//! the guest and compiles the result: seconds, once per build, too slow after every edit.
//! `dev` needs only the memory. Whenever an export has returned, the guest's globals are the
//! built-in guest's again (the stack pointer is back where it started; CPython and its
//! runtime keep all of their state in linear memory): every build checks this of its own
//! snapshot, since `image::split` names any global a bake changed and `build` refuses the
//! result. So a live snapshot runs the same `bake` export in an ordinary instance (no files,
//! the settings' names without values, as the build's), copies the instance's linear memory
//! through its memory slot ([`MemoryWatch`]), makes the objects the guest listed immortal as a
//! build does ([`make_immortal`]), and keeps the bytes as an [`Image`] in memory. Every call
//! made from it is still a fresh instance: it gets its own copy of the snapshot.
//!
//! Snapshots stack: one of the project's packages alone, then one of its routes taken in an
//! instance of the first, so an edit of a route re-imports the routes, not the packages.
//!
//! Not here: when `dev` takes one and what it serves meanwhile (`crate::imported`).

use std::{sync::Arc, time::Duration};

use super::{
    ProjectError, Purpose, Sandbox, SandboxError, TimeLimits,
    image::Image,
    slots::MemoryWatch,
    snapshot::{Sources, connections_left_open, make_immortal},
};

/// The limits of a snapshot's `bake`: a project's whole import (SQLAlchemy and pydantic take
/// a few seconds of CPU), far above a request's, since only the developer's own edits start
/// one.
pub const SNAPSHOT_TIME: TimeLimits = TimeLimits {
    cpu: Duration::from_secs(60),
    wall: Duration::from_secs(120),
};

impl Sandbox {
    /// Import `sources` in a fresh instance of this sandbox's guest and return its memory as
    /// an image: a failure names the file and line as any call's does.
    pub async fn live_snapshot(&self, sources: Sources) -> Result<Arc<Image>, SandboxError> {
        let watch = Arc::new(MemoryWatch::default());
        let label = format!(
            "snapshot of {} route files and {} package files",
            sources.routes.len(),
            sources.packages.len()
        );
        let taken = self
            .call(
                Purpose::Snapshot(watch.clone()),
                label,
                move |router, store| {
                    Box::pin(async move {
                        let baked = router
                            .filerouter_sandbox_guest()
                            .call_bake(
                                &mut *store,
                                &sources.files,
                                &sources.routes,
                                &sources.root_files,
                                &sources.packages,
                                sources.keep_compiled,
                            )
                            .await?;
                        if let Err(error) = baked {
                            return Ok(Err(error));
                        }
                        // A connection the snapshot kept would be a stale handle in every
                        // request (as a build checks, `super::snapshot`).
                        let open = store.data().db.open_connections();
                        if open > 0 {
                            return Ok(Err(still_open(open)));
                        }
                        // The instance is alive and between calls: its memory holds still.
                        let memory = watch.copy();
                        let immortal = store.data_mut().immortal.take().unwrap_or_default();
                        Ok(Ok((memory, immortal)))
                    })
                },
            )
            .await?;
        let (memory, immortal) = taken;
        let mut memory = memory.ok_or_else(|| {
            SandboxError::Setup("the snapshot's instance had no memory to copy".into())
        })?;
        make_immortal(&mut memory, &immortal);
        let image = tokio::task::spawn_blocking(move || Image::from_bytes(&memory))
            .await
            .map_err(|e| SandboxError::Setup(format!("keeping the snapshot panicked: {e}")))?
            .map_err(|e| SandboxError::Setup(e.to_string()))?;
        Ok(Arc::new(image))
    }

    /// The same project, settings and data, with calls starting from `image` (a live
    /// snapshot of this sandbox's guest).
    pub fn with_image(&self, image: Arc<Image>) -> Sandbox {
        self.rebuilt(|inner| inner.guest = inner.guest.with_image(image))
    }

    /// Let go of the idle memory slots that still map a replaced snapshot, so that its memory
    /// is given back (a `dev` edit replaces the snapshot of the routes).
    pub fn forget_unused_images(&self) -> usize {
        self.inner.guest.engine().forget_unused_images()
    }

    /// The memory image calls start from.
    pub fn image(&self) -> &Arc<Image> {
        self.inner.guest.image()
    }
}

/// The error of a snapshot whose import left `open` database connections open.
fn still_open(open: usize) -> ProjectError {
    ProjectError {
        kind: "OperationalError".into(),
        message: connections_left_open(open, "the snapshot"),
        file: None,
        line: None,
        frames: Vec::new(),
        traceback: String::new(),
        suggestions: Vec::new(),
    }
}
