//! Compiled code (`*.cwasm`) and memory images (`*.img`) on disk, in the cache folder: where
//! they live, how they are written, and how long they stay.
//!
//! Four kinds share the folder (`$FILEROUTER_CACHE_DIR`, default `~/.cache/filerouter`): the
//! guest's code compiled for this machine (`guest-*.cwasm`, one per filerouter build, shared
//! by every project), the guest instrumented for `build`'s snapshot (`bake-*.cwasm`, one per
//! filerouter build, see `snapshot`), each plugin's (`plugin-*.cwasm`), and each project's memory image as
//! `run` maps it (`images/*.img`, one per build, see `image`). A new filerouter, a new build or a changed plugin adds a
//! file and nothing else would ever remove the old one, so every use refreshes a file's
//! modification time ([`mark_used`]) and every new file removes those of its kind left unused for
//! [`UNUSED_AGE`] ([`prune_unused`]); images, one per build, also go least recently used first
//! beyond [`images_max_bytes`] together. Removing a file another process maps is safe: the
//! mapping keeps its pages (unlinking only removes the name), and the next load writes the file
//! again from its source (the build cache, the guest inside the binary, the plugin).
//!
//! Not here: compiled functions (`compiled_functions`, bounded by size), what the files
//! contain (`engine`), or how a file is checked before it is mapped (`checked_code`).

use std::{
    fs,
    io::Write,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, SystemTime},
};

/// How long a compiled file may go unused before a newer one of its kind removes it.
pub const UNUSED_AGE: Duration = Duration::from_secs(14 * 24 * 60 * 60);

/// The cache folder: `$FILEROUTER_CACHE_DIR`, else the user's cache folder.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FILEROUTER_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("filerouter")
}

/// Write `bytes` to `path` whole or not at all: a temporary file in the same folder, synced,
/// renamed over `path`. Readers never see half a file. The file is never writable by group or
/// others.
pub fn store_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_then_rename(path, bytes, true)
}

/// [`store_atomically`] without waiting for the disk: for many small files whose loss in a
/// crash costs only their recomputation (`compiled_functions`' entries).
pub fn store_atomically_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_then_rename(path, bytes, false)
}

fn write_then_rename(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".tmp-{}-{n}", std::process::id()));
    // A stale temporary of a dead process with this id goes first; the file is made anew with
    // no write permission for group or others whatever the umask (`checked_code` refuses to map
    // a file others may change), and no more read permission than the umask allows.
    let _ = fs::remove_file(&tmp);
    let created = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp);
    let written = created.and_then(|mut file| {
        file.write_all(bytes)?;
        if sync { file.sync_all() } else { Ok(()) }
    });
    match written.and_then(|()| fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Record that `path` was used now (its modification time), so the least-recently-used
/// pruning here and in `compiled_functions` keeps it. Best effort.
pub fn mark_used(path: &Path) {
    if let Ok(file) = fs::File::open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// How much disk the memory images (`images/*.img`) may take together before the least
/// recently used go: `$FILEROUTER_IMAGES_MAX_MB` MiB, default [`IMAGES_MAX_MB`]. Each build of
/// a project leaves an image of tens of MB, so age alone would let a day of builds fill a disk.
pub fn images_max_bytes() -> u64 {
    let mb = match std::env::var("FILEROUTER_IMAGES_MAX_MB") {
        Ok(value) => value.trim().parse::<u64>().unwrap_or_else(|_| {
            tracing::warn!(
                "FILEROUTER_IMAGES_MAX_MB={value:?} is not a whole number of MiB; using {IMAGES_MAX_MB}"
            );
            IMAGES_MAX_MB
        }),
        Err(_) => IMAGES_MAX_MB,
    };
    mb.saturating_mul(1024 * 1024)
}

/// The default of [`images_max_bytes`], in MiB: a hundred two-route projects' images.
pub const IMAGES_MAX_MB: u64 = 2048;

/// Remove the files directly in `dir` whose names start with `prefix` and end in `.cwasm` (or
/// `.img` and `.layer`, memory images, and `.hot`, their records of the pages requests read), other
/// than `keep`, that were not used for `max_age`; then, while
/// those left (`keep` included) take more than `max_bytes`, the least recently used of them.
/// Best effort: a file that cannot be read or removed is left. Returns how many were removed.
pub fn prune_unused(
    dir: &Path,
    prefix: &str,
    keep: &Path,
    max_age: Duration,
    max_bytes: Option<u64>,
) -> usize {
    let Some(cutoff) = SystemTime::now().checked_sub(max_age) else {
        return 0;
    };
    let mut removed = 0;
    let mut kept_bytes = 0u64;
    let mut candidates = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = [".cwasm", ".img", ".layer", ".hot"]
            .iter()
            .any(|suffix| name.ends_with(suffix));
        if !name.starts_with(prefix) || !ours {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        if path == keep {
            kept_bytes += meta.len();
            continue;
        }
        let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if used < cutoff && fs::remove_file(&path).is_ok() {
            tracing::debug!("removed {}, unused for {max_age:?}", path.display());
            removed += 1;
            continue;
        }
        candidates.push((used, meta.len(), path));
    }
    let Some(max_bytes) = max_bytes else {
        return removed;
    };
    let mut total = kept_bytes + candidates.iter().map(|(_, len, _)| len).sum::<u64>();
    candidates.sort();
    for (_, len, path) in candidates {
        if total <= max_bytes {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            tracing::debug!(
                "removed {}, the least recently used beyond {max_bytes} bytes",
                path.display()
            );
            removed += 1;
            total -= len;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 60 * 60);

    fn file(dir: &Path, name: &str, age: Duration) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, name).unwrap();
        let file = fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
        path
    }

    #[test]
    fn only_old_files_of_the_kind_go_and_the_new_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let old = file(dir.path(), "guest-old.cwasm", 30 * DAY);
        let recent = file(dir.path(), "guest-recent.cwasm", DAY);
        let keep = file(dir.path(), "guest-new.cwasm", 30 * DAY);
        let plugin = file(dir.path(), "plugin-old.cwasm", 30 * DAY);
        let other = file(dir.path(), "guest-notes.txt", 30 * DAY);
        fs::create_dir(dir.path().join("guest-dir.cwasm")).unwrap();

        assert_eq!(
            prune_unused(dir.path(), "guest-", &keep, UNUSED_AGE, None),
            1
        );
        assert!(!old.exists());
        for stays in [&recent, &keep, &plugin, &other] {
            assert!(stays.exists(), "{} removed", stays.display());
        }
        assert!(dir.path().join("guest-dir.cwasm").is_dir());
    }

    #[test]
    fn a_file_in_use_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let used = file(dir.path(), "a.cwasm", 30 * DAY);
        mark_used(&used);
        let keep = dir.path().join("b.cwasm");
        assert_eq!(prune_unused(dir.path(), "", &keep, UNUSED_AGE, None), 0);
        assert!(used.exists());
    }

    #[test]
    fn beyond_the_size_limit_the_least_recently_used_go_first() {
        let dir = tempfile::tempdir().unwrap();
        // Each file holds its own name: 5 bytes ("a.img" ...).
        let oldest = file(dir.path(), "a.img", 3 * DAY);
        let older = file(dir.path(), "b.img", 2 * DAY);
        let newer = file(dir.path(), "c.img", DAY);
        let keep = file(dir.path(), "d.img", 4 * DAY);
        assert_eq!(prune_unused(dir.path(), "", &keep, UNUSED_AGE, Some(10)), 2);
        assert!(!oldest.exists() && !older.exists());
        assert!(newer.exists() && keep.exists());
        // Under the limit, nothing goes; the kept file alone may exceed it.
        assert_eq!(prune_unused(dir.path(), "", &keep, UNUSED_AGE, Some(10)), 0);
        assert_eq!(prune_unused(dir.path(), "", &keep, UNUSED_AGE, Some(1)), 1);
        assert!(keep.exists() && !newer.exists());
    }

    #[test]
    fn a_stored_file_is_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("x.cwasm");
        store_atomically(&path, b"one").unwrap();
        store_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o022, 0, "writable by others: {mode:o}");
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.cwasm")]);
    }
}
