//! The files SQLite writes for one project, counted: a VFS of the host's own over the
//! operating system's (`unix`), one per database ([`Disk`]).
//!
//! Two kinds of files grow past the database file's page limit (`max_page_count`) when
//! nothing counts them:
//! - **temporary files**: `CREATE TEMP TABLE`, sorts and indexes too big for memory, statement
//!   journals. SQLite creates them in the system's temporary folder (deleted as they are
//!   opened, so they show in no folder listing); here every byte written to them counts against
//!   the project's [`Disk::temp_max`], shared by all its connections, and a write past it fails
//!   as a full disk (`SQLITE_FULL`, which route code sees as `db.LimitExceeded`);
//! - **the write-ahead log** (`db.sqlite3-wal`): it grows while readers keep old pages in use,
//!   and keeps its size afterwards. Here the log may grow only while the database file and the
//!   log together stay within the database's size limit ([`Disk::max_size`]); a commit that
//!   would pass it fails as a full disk and is rolled back.
//!
//! One more thing differs from `unix`: on a thread that runs a statement with
//! [`without_waiting`] (a guest's thread, see `super::sqlite::Connection::execute_here`),
//! SQLite's own sleeps (`xSleep`: the pauses between a reader's retries while a writer moves
//! the log's index) return at once and are noted, so that the statement is run again on a
//! database thread instead of making that thread wait.
//!
//! Everything else is passed to `unix` unchanged. Not here: what the host does to shrink the
//! log again (checkpoints, `journal_size_limit`: [`super::sqlite`]), or the page limit itself.

use std::{
    ffi::{CStr, CString, c_char, c_int, c_void},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use rusqlite::ffi;

/// Which bound the VFS last refused a write for, on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The project's temporary files are at `temp_max`.
    Temp,
    /// The database file and its log are at `max_size`.
    Log,
}

thread_local! {
    static REFUSED: std::cell::Cell<Option<Refusal>> = const { std::cell::Cell::new(None) };
    /// Whether SQLite may sleep on this thread (false inside [`without_waiting`]).
    static NO_WAITING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether SQLite asked to sleep inside [`without_waiting`].
    static WOULD_HAVE_WAITED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `op` with SQLite's sleeps on this thread skipped; also returns whether SQLite asked to
/// sleep meanwhile (then whatever `op` got is to be thrown away and done again where waiting
/// is allowed).
pub fn without_waiting<T>(op: impl FnOnce() -> T) -> (T, bool) {
    let before = NO_WAITING.replace(true);
    WOULD_HAVE_WAITED.set(false);
    let value = op();
    NO_WAITING.set(before);
    (value, WOULD_HAVE_WAITED.take())
}

/// The bound behind the last full-disk error on this thread, if the VFS refused (and forget
/// it): the error SQLite reports is the same `SQLITE_FULL` for every cause.
pub fn take_refusal() -> Option<Refusal> {
    REFUSED.take()
}

/// How far past the last size check the log may grow before the next one: checks cost a
/// `stat` of the database file, and a 15 MB commit writes the log in 4 KB frames.
const CHECK_EVERY: u64 = 1024 * 1024;

/// One database's VFS, registered with SQLite under a name of its own for as long as this
/// lives; every connection that uses it keeps it alive.
pub struct Disk {
    name: CString,
    vfs: *mut ffi::sqlite3_vfs,
    counts: *mut Counts,
}

// SAFETY: the pointers are owned by `Disk` (freed in `drop`); SQLite reads the VFS from any
// thread, and `Counts` holds only atomics and immutable fields.
unsafe impl Send for Disk {}
unsafe impl Sync for Disk {}

/// What the VFS's files share: the bounds and what is used of them.
struct Counts {
    base: *mut ffi::sqlite3_vfs,
    temp_max: u64,
    temp_used: AtomicU64,
    max_size: u64,
    /// The database file, whose size the log's growth is checked against (`None`: in-memory
    /// databases, which have no log).
    main: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[error("SQLite has no default VFS to build on")]
pub struct NoBaseVfs;

impl Disk {
    /// A VFS for the database at `main` (or for in-memory databases), whose temporary files
    /// may hold `temp_max` bytes at once, and whose file and log together `max_size`.
    pub fn new(main: Option<&Path>, temp_max: u64, max_size: u64) -> Result<Arc<Disk>, NoBaseVfs> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // SAFETY: a null name asks for the default VFS, which SQLite keeps for the process.
        let base = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
        if base.is_null() {
            return Err(NoBaseVfs);
        }
        let name = CString::new(format!(
            "filerouter-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
        .map_err(|_| NoBaseVfs)?;
        let counts = Box::into_raw(Box::new(Counts {
            base,
            temp_max,
            temp_used: AtomicU64::new(0),
            max_size,
            main: main.map(Path::to_path_buf),
        }));
        // SAFETY: `base` is a valid VFS; ours copies it and overrides what it must.
        let vfs = unsafe {
            let mut vfs: ffi::sqlite3_vfs = std::ptr::read(base);
            vfs.iVersion = vfs.iVersion.min(3);
            vfs.szOsFile = (std::mem::size_of::<File>() + (*base).szOsFile as usize) as c_int;
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = name.as_ptr();
            vfs.pAppData = counts as *mut c_void;
            vfs.xOpen = Some(open);
            vfs.xDelete = Some(delete);
            vfs.xAccess = Some(access);
            vfs.xFullPathname = Some(full_pathname);
            vfs.xSleep = Some(sleep);
            Box::into_raw(Box::new(vfs))
        };
        // SAFETY: `vfs` lives until `drop` unregisters it; 0: not the default.
        let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
        if rc != ffi::SQLITE_OK {
            // SAFETY: never registered; ours to free.
            unsafe {
                drop(Box::from_raw(vfs));
                drop(Box::from_raw(counts));
            }
            return Err(NoBaseVfs);
        }
        Ok(Arc::new(Disk { name, vfs, counts }))
    }

    /// The name to open connections with.
    pub fn name(&self) -> &CStr {
        &self.name
    }

    /// Bytes the temporary files may hold at once.
    pub fn temp_max(&self) -> u64 {
        self.counts().temp_max
    }

    /// Bytes the temporary files hold now.
    pub fn temp_used(&self) -> u64 {
        self.counts().temp_used.load(Ordering::Relaxed)
    }

    /// The database file and its log together, at most.
    pub fn max_size(&self) -> u64 {
        self.counts().max_size
    }

    fn counts(&self) -> &Counts {
        // SAFETY: `counts` is freed only in `drop`.
        unsafe { &*self.counts }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        // SAFETY: every connection using the VFS holds an `Arc<Disk>` and is closed before it
        // is released, so nothing uses the VFS or its files now.
        unsafe {
            ffi::sqlite3_vfs_unregister(self.vfs);
            drop(Box::from_raw(self.vfs));
            drop(Box::from_raw(self.counts));
        }
    }
}

/// Which bound a file's growth counts against.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Other,
    Temp,
    Log,
}

/// Our file: the counting state, with the `unix` file right after it in the same block.
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    counts: *const Counts,
    kind: Kind,
    /// Temp: the bytes counted for it. Log: the end of the furthest write seen.
    size: u64,
    /// Log: growth up to here needs no new check.
    checked_to: u64,
}

/// The `unix` file inside ours.
unsafe fn inner(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: SQLite gives us blocks of `szOsFile` bytes: `File`, then the inner file.
    unsafe { (file as *mut u8).add(std::mem::size_of::<File>()) as *mut ffi::sqlite3_file }
}

unsafe fn counts_of(vfs: *mut ffi::sqlite3_vfs) -> &'static Counts {
    // SAFETY: our VFS's `pAppData` is its `Counts`, alive while the VFS is registered.
    unsafe { &*((*vfs).pAppData as *const Counts) }
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite's arguments, passed on to the base VFS with the inner file.
    unsafe {
        let counts = counts_of(vfs);
        let ours = file as *mut File;
        let kind = if flags
            & (ffi::SQLITE_OPEN_TEMP_DB
                | ffi::SQLITE_OPEN_TEMP_JOURNAL
                | ffi::SQLITE_OPEN_TRANSIENT_DB
                | ffi::SQLITE_OPEN_SUBJOURNAL)
            != 0
            || name.is_null()
        {
            Kind::Temp
        } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
            Kind::Log
        } else {
            Kind::Other
        };
        std::ptr::write(
            ours,
            File {
                base: ffi::sqlite3_file {
                    pMethods: std::ptr::null(),
                },
                counts,
                kind,
                size: 0,
                checked_to: 0,
            },
        );
        let inner = inner(file);
        let base = counts.base;
        let Some(base_open) = (*base).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = base_open(base, name, inner, flags, out_flags);
        if (*inner).pMethods.is_null() {
            return rc;
        }
        (*ours).base.pMethods = &METHODS;
        if kind == Kind::Log {
            let mut size: ffi::sqlite3_int64 = 0;
            if let Some(file_size) = (*(*inner).pMethods).xFileSize
                && file_size(inner, &mut size) == ffi::SQLITE_OK
            {
                (*ours).size = size.max(0) as u64;
            }
        }
        rc
    }
}

/// `unix`'s sleep, except inside [`without_waiting`], where it is noted and skipped.
unsafe extern "C" fn sleep(vfs: *mut ffi::sqlite3_vfs, microseconds: c_int) -> c_int {
    if NO_WAITING.get() {
        WOULD_HAVE_WAITED.set(true);
        return 0;
    }
    // SAFETY: SQLite's arguments, passed on to the base VFS.
    unsafe {
        let base = counts_of(vfs).base;
        match (*base).xSleep {
            Some(base_sleep) => base_sleep(base, microseconds),
            None => 0,
        }
    }
}

unsafe extern "C" fn delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    // SAFETY: passed on to the base VFS.
    unsafe {
        let base = counts_of(vfs).base;
        match (*base).xDelete {
            Some(f) => f(base, name, sync_dir),
            None => ffi::SQLITE_IOERR_DELETE,
        }
    }
}

unsafe extern "C" fn access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    // SAFETY: passed on to the base VFS.
    unsafe {
        let base = counts_of(vfs).base;
        match (*base).xAccess {
            Some(f) => f(base, name, flags, out),
            None => ffi::SQLITE_IOERR_ACCESS,
        }
    }
}

unsafe extern "C" fn full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: passed on to the base VFS.
    unsafe {
        let base = counts_of(vfs).base;
        match (*base).xFullPathname {
            Some(f) => f(base, name, n_out, out),
            None => ffi::SQLITE_CANTOPEN,
        }
    }
}

/// The inner file's method table.
unsafe fn methods(file: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: `open` installs our methods only when the inner file has its own.
    unsafe { &*(*inner(file)).pMethods }
}

/// Call the inner file's method `$m` with the inner file and `$args`, or answer `$missing`.
macro_rules! forward {
    ($file:expr, $m:ident, $missing:expr $(, $arg:expr)*) => {{
        let inner = inner($file);
        match methods($file).$m {
            Some(f) => f(inner $(, $arg)*),
            None => $missing,
        }
    }};
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: our file, closed once.
    unsafe {
        let ours = &mut *(file as *mut File);
        if ours.kind == Kind::Temp {
            (*ours.counts)
                .temp_used
                .fetch_sub(ours.size, Ordering::Relaxed);
            ours.size = 0;
        }
        forward!(file, xClose, ffi::SQLITE_OK)
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xRead, ffi::SQLITE_IOERR_READ, buf, amount, offset) }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: our file; passed on when within its bound.
    unsafe {
        let ours = &mut *(file as *mut File);
        let end = (offset.max(0) as u64).saturating_add(amount.max(0) as u64);
        if end > ours.size && !grow(ours, end) {
            REFUSED.set(Some(match ours.kind {
                Kind::Log => Refusal::Log,
                _ => Refusal::Temp,
            }));
            return ffi::SQLITE_FULL;
        }
        forward!(file, xWrite, ffi::SQLITE_IOERR_WRITE, buf, amount, offset)
    }
}

/// Whether `file` may grow to `end` bytes; counts the growth when it may.
fn grow(file: &mut File, end: u64) -> bool {
    // SAFETY: the VFS's counts outlive its files.
    let counts = unsafe { &*file.counts };
    match file.kind {
        Kind::Other => true,
        Kind::Temp => {
            let more = end - file.size;
            let taken =
                counts
                    .temp_used
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                        (used.saturating_add(more) <= counts.temp_max).then_some(used + more)
                    });
            if taken.is_err() {
                return false;
            }
            file.size = end;
            true
        }
        Kind::Log => {
            if end > file.checked_to {
                let main = counts
                    .main
                    .as_deref()
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map_or(0, |m| m.len());
                let total = main.saturating_add(end);
                if total > counts.max_size {
                    return false;
                }
                // Near the bound, every growth is checked.
                file.checked_to = if total.saturating_add(CHECK_EVERY) <= counts.max_size {
                    end + CHECK_EVERY
                } else {
                    end
                };
            }
            file.size = end;
            true
        }
    }
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    // SAFETY: our file; passed on.
    unsafe {
        let ours = &mut *(file as *mut File);
        let size = size.max(0) as u64;
        match ours.kind {
            Kind::Temp if size < ours.size => {
                (*ours.counts)
                    .temp_used
                    .fetch_sub(ours.size - size, Ordering::Relaxed);
                ours.size = size;
            }
            Kind::Log => {
                ours.size = size;
                ours.checked_to = ours.checked_to.min(size);
            }
            _ => {}
        }
        forward!(
            file,
            xTruncate,
            ffi::SQLITE_IOERR_TRUNCATE,
            size as ffi::sqlite3_int64
        )
    }
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xSync, ffi::SQLITE_IOERR_FSYNC, flags) }
}

unsafe extern "C" fn file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xFileSize, ffi::SQLITE_IOERR_FSTAT, size) }
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xLock, ffi::SQLITE_IOERR_LOCK, level) }
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xUnlock, ffi::SQLITE_IOERR_UNLOCK, level) }
}

unsafe extern "C" fn check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: passed on.
    unsafe {
        forward!(
            file,
            xCheckReservedLock,
            ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
            out
        )
    }
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xFileControl, ffi::SQLITE_NOTFOUND, op, arg) }
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xSectorSize, 4096) }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xDeviceCharacteristics, 0) }
}

unsafe extern "C" fn shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: passed on.
    unsafe {
        forward!(
            file,
            xShmMap,
            ffi::SQLITE_IOERR_SHMMAP,
            region,
            size,
            extend,
            out
        )
    }
}

unsafe extern "C" fn shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xShmLock, ffi::SQLITE_IOERR_SHMLOCK, offset, n, flags) }
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: passed on.
    unsafe { forward!(file, xShmBarrier, ()) }
}

unsafe extern "C" fn shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xShmUnmap, ffi::SQLITE_OK, delete) }
}

unsafe extern "C" fn fetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: passed on; without the inner method, no mapping (SQLite then reads).
    unsafe {
        let inner = inner(file);
        match methods(file).xFetch {
            Some(f) => f(inner, offset, amount, out),
            None => {
                *out = std::ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn unfetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    page: *mut c_void,
) -> c_int {
    // SAFETY: passed on.
    unsafe { forward!(file, xUnfetch, ffi::SQLITE_OK, offset, page) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(disk: &Disk, path: &str) -> rusqlite::Connection {
        rusqlite::Connection::open_with_flags_and_vfs(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_CREATE,
            disk.name(),
        )
        .unwrap()
    }

    #[test]
    fn sleeps_are_skipped_and_noted_without_waiting() {
        let disk = Disk::new(None, u64::MAX, u64::MAX).unwrap();
        // SAFETY: the registered VFS, alive while `disk` is.
        let sleep = unsafe { (*disk.vfs).xSleep.unwrap() };
        let started = std::time::Instant::now();
        // SAFETY: our VFS's own sleep, as SQLite calls it.
        let (_, waited) = without_waiting(|| unsafe { sleep(disk.vfs, 300_000) });
        assert!(waited);
        assert!(started.elapsed() < std::time::Duration::from_millis(200));
        let (_, waited) = without_waiting(|| ());
        assert!(!waited, "noted afresh each time");
        let started = std::time::Instant::now();
        // SAFETY: as above.
        unsafe { sleep(disk.vfs, 20_000) };
        assert!(started.elapsed() >= std::time::Duration::from_millis(15));
    }

    #[test]
    fn temporary_files_count_against_the_bound_and_are_given_back() {
        let disk = Disk::new(None, 4 << 20, u64::MAX).unwrap();
        let conn = open(&disk, ":memory:");
        conn.execute_batch("CREATE TEMP TABLE t (b BLOB)").unwrap();
        let full = conn
            .execute_batch("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) INSERT INTO t SELECT randomblob(100000) FROM n");
        let err = full.unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DiskFull),
            "{err}"
        );
        assert!(disk.temp_used() <= disk.temp_max());
        conn.execute_batch("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) INSERT INTO t SELECT randomblob(100000) FROM n")
            .unwrap();
        assert!(disk.temp_used() > 0);
        drop(conn);
        assert_eq!(disk.temp_used(), 0, "closing gives the bytes back");
    }

    #[test]
    fn the_log_grows_only_while_file_and_log_fit_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let disk = Disk::new(Some(&path), u64::MAX, 8 << 20).unwrap();
        let conn = open(&disk, path.to_str().unwrap());
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (b BLOB)").unwrap();
        // A reader holds the log's old frames, so the log cannot start over.
        let reader = open(&disk, path.to_str().unwrap());
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM t;")
            .unwrap();
        let mut refused = None;
        for _ in 0..40 {
            if let Err(e) = conn.execute("INSERT INTO t VALUES (randomblob(1000000))", []) {
                refused = Some(e);
                break;
            }
        }
        let refused = refused.expect("the log reached the bound");
        assert_eq!(
            refused.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DiskFull)
        );
        let wal = std::fs::metadata(dir.path().join("db.sqlite3-wal"))
            .unwrap()
            .len();
        let main = std::fs::metadata(&path).unwrap().len();
        assert!(main + wal <= 8 << 20, "file {main} + log {wal}");
        reader.execute_batch("COMMIT").unwrap();
    }
}
