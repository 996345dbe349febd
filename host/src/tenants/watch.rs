//! Changes without a restart: the tenants file and every tenant's build cache are looked at
//! twice a second.
//!
//! - An edit of the tenants file is checked in full; a good one adds, removes and reconfigures
//!   tenants at once, a broken one is logged (file and line) and the last good one stays.
//! - A new build of a loaded tenant is loaded beside the running version and swapped in when it
//!   is ready; requests in flight finish on the version they started on. A build that cannot be
//!   used (corrupt, tampered with, wrong key) is logged and the last good version keeps serving;
//!   it is tried again after a back-off (see [`super::REFUSED_RETRY_MIN`]), and at once when the
//!   cache changes again.
//! - A refused tenant (not loaded) is tried again on its next request once its cache changes,
//!   or once its back-off is over, whether or not the cache changed (a database migrated
//!   meanwhile, say).
//! - Tenants idle for `idle_unload_s` are unloaded.
//!
//! Polling (a few `stat` calls per tick, off the async threads) rather than file events: it sees
//! caches and folders that appear later, renames over the file, and editors' save dances alike.

use std::{path::PathBuf, time::Duration};

use super::{Tenants, load::CacheStamp};

/// How often the files are looked at.
pub const INTERVAL: Duration = Duration::from_millis(500);

/// Watch `tenants`' file and caches until the process ends.
pub fn spawn(tenants: Tenants) {
    tokio::spawn(async move {
        let mut file_stamp = stamp_of(tenants.file().to_path_buf()).await;
        let mut ticker = tokio::time::interval(INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let now = stamp_of(tenants.file().to_path_buf()).await;
            if now != file_stamp {
                file_stamp = now;
                tenants.reload_config().await;
            }
            tenants.check_caches().await;
            tenants.unload_idle();
        }
    });
}

async fn stamp_of(path: PathBuf) -> Option<CacheStamp> {
    tokio::task::spawn_blocking(move || CacheStamp::of_file(&path))
        .await
        .ok()
        .flatten()
}

/// The cache stamps of `dirs`, looked up off the async threads.
pub(super) async fn cache_stamps(dirs: Vec<PathBuf>) -> Vec<Option<CacheStamp>> {
    let count = dirs.len();
    tokio::task::spawn_blocking(move || dirs.iter().map(|d| CacheStamp::of(d)).collect())
        .await
        .unwrap_or_else(|_| vec![None; count])
}
