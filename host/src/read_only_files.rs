//! Opening files in the guest's read-only folders (`/routes` and `/packages` in development, a
//! plugin's `/files`) without ever blocking a host thread.
//!
//! wasmtime-wasi opens a file with a plain `open(2)` on one of the runtime's blocking threads.
//! Opening a FIFO for reading waits until something opens it for writing, which may be never:
//! route code that opens `routes/pipe` would hold that thread forever (its request gets its 504,
//! the thread stays), fifty such requests fifty threads, and the runtime's shutdown would wait
//! for them. So this module takes over `wasi:filesystem/types`' `open-at` for opens that only
//! read: the file is opened here with `O_NONBLOCK` (which never waits on a FIFO) through
//! cap-std's sandboxed lookup (no `..` or absolute symlink leads out of the folder), checked
//! with `fstat`, and handed to the guest as wasmtime-wasi's own descriptor if it is a regular
//! file or a folder. Anything else (a FIFO, a socket, a device) is refused with `access`
//! (`PermissionError` in Python) and a log line naming it. Opens that ask to create, truncate
//! or write go to wasmtime-wasi unchanged, which refuses them on a read-only folder before
//! the operating system sees them.
//!
//! This module only decides how a read-only open is made; which folders a guest sees is the
//! sandbox's business (`crate::sandbox`, `crate::plugins`), which both link this.

use std::{fs::File, os::fd::AsRawFd, path::Path, sync::Arc};

use cap_primitives::fs::{OpenOptions, OpenOptionsExt};
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::{
    OpenMode, WasiView,
    filesystem::{Descriptor, Dir, WasiFilesystemView},
    p2::{
        FsError,
        bindings::filesystem::types::{
            DescriptorFlags, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
        },
    },
};

use crate::regular_file::irregular_kind;

/// The WASI interface whose `open-at` is taken over, as wasmtime-wasi names it (a guest
/// importing an older 0.2 version is linked to it too).
const TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Take over `open-at` in `linker` (after `wasmtime_wasi::p2::add_to_linker_async`).
pub fn link<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = linker.instance(TYPES).and_then(|mut types| {
        types.func_wrap_async(
            "[method]descriptor.open-at",
            |mut store,
             (fd, path_flags, path, oflags, flags): (
                Resource<Descriptor>,
                PathFlags,
                String,
                OpenFlags,
                DescriptorFlags,
            )| {
                Box::new(async move {
                    let opened = open_at(store.data_mut(), fd, path_flags, path, oflags, flags);
                    Ok((opened.await?,))
                })
            },
        )
    });
    linker.allow_shadowing(false);
    linked
}

/// `open-at` for one guest: read-only opens here, the rest by wasmtime-wasi.
async fn open_at<T: WasiView>(
    state: &mut T,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> wasmtime::Result<Result<Resource<Descriptor>, ErrorCode>> {
    // Asking for a folder's right to change it is still a read-only open (the descriptor
    // keeps the folder's read-only permissions); writing, creating, truncating or syncing is
    // not, and wasmtime-wasi refuses those on a read-only folder without opening anything.
    let reads_only = ![
        DescriptorFlags::WRITE,
        DescriptorFlags::FILE_INTEGRITY_SYNC,
        DescriptorFlags::DATA_INTEGRITY_SYNC,
        DescriptorFlags::REQUESTED_WRITE_SYNC,
    ]
    .into_iter()
    .any(|flag| flags.contains(flag))
        && ![OpenFlags::CREATE, OpenFlags::EXCLUSIVE, OpenFlags::TRUNCATE]
            .into_iter()
            .any(|flag| oflags.contains(flag));
    let dir = match state.ctx().table.get(&fd)? {
        Descriptor::Dir(dir) if reads_only => Some((dir.dir.clone(), dir.perms)),
        _ => None,
    };
    let Some((dir, perms)) = dir else {
        let mut view = state.filesystem();
        return settle(
            HostDescriptor::open_at(&mut view, fd, path_flags, path, oflags, flags).await,
        );
    };
    let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
    let directory = oflags.contains(OpenFlags::DIRECTORY);
    let shown = path.clone();
    let opened = tokio::task::spawn_blocking(move || open(&dir, &path, follow, directory)).await;
    let descriptor = match opened {
        Ok(Ok(Opened::File(file))) => Descriptor::File(wasmtime_wasi::filesystem::File::new(
            file,
            perms,
            OpenMode::READ,
            false,
        )),
        Ok(Ok(Opened::Dir(file))) => Descriptor::Dir(Dir::new(file, perms, OpenMode::READ, false)),
        Ok(Ok(Opened::Refused(kind))) => {
            tracing::warn!(
                "the guest opened {shown:?}, a {kind}: refused, only regular files and folders can be opened in the sandbox"
            );
            return Ok(Err(ErrorCode::Access));
        }
        Ok(Err(error)) => return settle(Err(FsError::from(error))),
        Err(join) => return Err(wasmtime::Error::msg(format!("opening a file: {join}"))),
    };
    Ok(Ok(state.ctx().table.push(descriptor)?))
}

/// An `open-at` result as the guest gets it: a WASI error code, or a trap for anything else.
fn settle<R>(result: Result<R, FsError>) -> wasmtime::Result<Result<R, ErrorCode>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error) => error.downcast().map(Err),
    }
}

/// What a read-only open found.
enum Opened {
    File(File),
    Dir(File),
    /// Not a regular file or a folder: what it is, in words.
    Refused(&'static str),
}

/// Open `path` in `dir` for reading without waiting, and say what it is.
fn open(dir: &Arc<File>, path: &str, follow: bool, directory: bool) -> std::io::Result<Opened> {
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    if directory {
        flags |= libc::O_DIRECTORY;
    }
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(flags);
    let file = cap_primitives::fs::open(dir, Path::new(path), &options)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_dir()
        && let Some(what) = irregular_kind(&kind)
    {
        return Ok(Opened::Refused(what));
    }
    // Reads of a regular file or a folder never wait; the flag is cleared all the same, so the
    // descriptor is the one wasmtime-wasi would have made.
    // SAFETY: `file` is an open descriptor owned here; F_GETFL/F_SETFL change only its status
    // flags.
    unsafe {
        let status = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if status >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, status & !libc::O_NONBLOCK);
        }
    }
    Ok(if kind.is_dir() {
        Opened::Dir(file)
    } else {
        Opened::File(file)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> (tempfile::TempDir, Arc<File>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
        std::fs::create_dir(dir.path().join("pkg")).unwrap();
        let c =
            std::ffi::CString::new(dir.path().join("pipe").as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        std::os::unix::fs::symlink("pipe", dir.path().join("to-pipe")).unwrap();
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("out")).unwrap();
        let file = Arc::new(File::open(dir.path()).unwrap());
        (dir, file)
    }

    #[test]
    fn files_and_folders_open_fifos_are_refused_without_waiting() {
        let (_keep, dir) = folder();
        assert!(matches!(
            open(&dir, "a.py", true, false),
            Ok(Opened::File(_))
        ));
        assert!(matches!(open(&dir, "pkg", true, false), Ok(Opened::Dir(_))));
        assert!(matches!(open(&dir, "pkg", true, true), Ok(Opened::Dir(_))));
        // Each of these would wait forever in a blocking open: no writer ever comes.
        assert!(matches!(
            open(&dir, "pipe", true, false),
            Ok(Opened::Refused("FIFO"))
        ));
        assert!(matches!(
            open(&dir, "to-pipe", true, false),
            Ok(Opened::Refused("FIFO"))
        ));
        let Ok(Opened::File(file)) = open(&dir, "a.py", true, false) else {
            panic!("a.py is a file")
        };
        let status = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(
            status & libc::O_NONBLOCK,
            0,
            "the descriptor blocks as usual"
        );
    }

    #[test]
    fn lookups_stay_in_the_folder() {
        let (_keep, dir) = folder();
        for escape in ["../", "/etc/passwd", "out", "pkg/../../x"] {
            assert!(open(&dir, escape, true, false).is_err(), "{escape}");
        }
        assert!(open(&dir, "loop", true, false).is_err());
        assert!(
            open(&dir, "to-pipe", false, false).is_err(),
            "no follow: a symlink"
        );
        assert!(open(&dir, "a.py", true, true).is_err(), "not a folder");
        assert!(open(&dir, "absent", true, false).is_err());
    }
}
