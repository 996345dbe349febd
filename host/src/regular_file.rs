//! Reading files that someone other than the server controls, without trusting their kind or
//! size.
//!
//! A project folder (or its build cache, or an operator's tenants file) may hold a FIFO, a
//! device, a socket, a symlink to `/dev/zero` or one that loops, or a file of many gigabytes
//! where a source file, a plugin or a cache is expected. Every file the host reads from a
//! project, and every file an operator names, goes through here: it is opened with
//! `O_NONBLOCK` (so opening a FIFO never waits for a writer), checked with `fstat` to be a
//! regular file, and its size is checked against a bound before a byte is read (and the read
//! stops at the bound should the file grow meanwhile). Files that must stay inside a folder
//! (a plugin's component and WIT files, inside its project) are read with [`read_inside`]: a
//! symlink may lead elsewhere in the folder, never out of it. Files that hold secrets (a
//! project's env file) are read with [`read_own_inside`]: besides staying inside, the file
//! may have no other hard link, which could be another project's file of the same secrets.
//!
//! Each kind of file has its bound here, as a `MAX_*_BYTES` constant.
//!
//! These calls block on the file system: call them from `spawn_blocking` or outside the async
//! runtime, never on its threads. What the bytes mean is the caller's business.

use std::{
    fmt,
    fs::{File, Metadata, OpenOptions},
    io::Read,
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

/// The most a Python source file the host reads (`config.py`, root files, route files baked
/// by `build`, migrations, the files of `.packages/`) may hold.
pub const MAX_SOURCE_BYTES: u64 = 16 * 1024 * 1024;

/// The most a tenants file (`run --tenants FILE`) may hold: a thousand tenants take about
/// 300 KiB.
pub const MAX_TENANTS_BYTES: u64 = 1024 * 1024;

/// The most a project's `pyproject.toml` may hold.
pub const MAX_PYPROJECT_BYTES: u64 = 1024 * 1024;

/// The most a plugin's component (`.wasm`) may hold. A Python plugin made by componentize-py
/// carries CPython and its standard library: the example's `markdown.wasm` is 18.6 MB, and
/// one with a few packages more is still well under this.
pub const MAX_COMPONENT_BYTES: u64 = 128 * 1024 * 1024;

/// The most one WIT file of a plugin (in its `wit/` folder or `wit/deps/`) may hold.
pub const MAX_WIT_BYTES: u64 = 1024 * 1024;

/// The most the WIT files of one plugin may hold together.
pub const MAX_WIT_TOTAL_BYTES: u64 = 8 * 1024 * 1024;

/// Why a file could not be read. Each names the file and says what is wrong with it.
#[derive(Debug)]
pub enum FileError {
    NotFound(PathBuf),
    NotRegular {
        path: PathBuf,
        kind: &'static str,
    },
    TooLarge {
        path: PathBuf,
        size: u64,
        max: u64,
    },
    NotText(PathBuf),
    /// The file, once its symlinks are followed, is not inside the folder it must stay in.
    Outside {
        path: PathBuf,
        /// The folder it must stay in.
        root: PathBuf,
        /// Where it leads.
        target: PathBuf,
    },
    /// A file of secrets with more than one hard link: the other name may be outside the
    /// folder (another project's `.env`), which a link count cannot tell.
    Linked {
        path: PathBuf,
        links: u64,
    },
    Io {
        path: PathBuf,
        reason: String,
    },
}

impl FileError {
    fn io(path: &Path, e: std::io::Error) -> FileError {
        if e.kind() == std::io::ErrorKind::NotFound {
            FileError::NotFound(path.to_path_buf())
        } else if e.raw_os_error() == Some(libc::ELOOP) {
            FileError::Io {
                path: path.to_path_buf(),
                reason: "a symlink loop (too many levels of symbolic links)".into(),
            }
        } else {
            FileError::Io {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        }
    }

    /// The file, as the caller named it.
    pub fn path(&self) -> &Path {
        match self {
            FileError::NotFound(path) | FileError::NotText(path) => path,
            FileError::NotRegular { path, .. }
            | FileError::TooLarge { path, .. }
            | FileError::Outside { path, .. }
            | FileError::Linked { path, .. }
            | FileError::Io { path, .. } => path,
        }
    }

    /// What is wrong with the file, without its name (for messages that name it already).
    pub fn reason(&self) -> String {
        match self {
            FileError::NotFound(_) => "no such file".into(),
            FileError::NotRegular { kind, .. } => {
                format!("not a regular file (a {kind}); only regular files are read")
            }
            FileError::TooLarge { size, max, .. } => {
                format!("{size} bytes, more than the {max} bytes allowed for it")
            }
            FileError::NotText(_) => "not UTF-8 text".into(),
            FileError::Outside { root, target, .. } => format!(
                "leads outside the project folder {} (to {}); only files inside it are read",
                root.display(),
                target.display()
            ),
            FileError::Linked { links, .. } => format!(
                "has {links} hard links; a file of secrets is read only when it has one, since \
                 another name of it may be another project's file: copy the file rather than \
                 linking it"
            ),
            FileError::Io { reason, .. } => reason.clone(),
        }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path().display(), self.reason())
    }
}

impl std::error::Error for FileError {}

/// What kind of file `meta` describes, in words, when it is not a regular file.
pub fn irregular_kind(meta: &std::fs::FileType) -> Option<&'static str> {
    if meta.is_file() {
        None
    } else if meta.is_dir() {
        Some("directory")
    } else if meta.is_fifo() {
        Some("FIFO")
    } else if meta.is_char_device() {
        Some("character device")
    } else if meta.is_block_device() {
        Some("block device")
    } else if meta.is_socket() {
        Some("socket")
    } else {
        Some("special file")
    }
}

/// Open `path` (following symlinks) for reading, if it is a regular file of at most `max`
/// bytes.
pub fn open(path: &Path, max: u64) -> Result<(File, Metadata), FileError> {
    open_as(path, path, max)
}

/// Open `actual` for reading, if it is a regular file of at most `max` bytes; errors name
/// `shown`.
fn open_as(shown: &Path, actual: &Path, max: u64) -> Result<(File, Metadata), FileError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(actual)
    {
        Ok(file) => file,
        Err(e) => {
            // A socket cannot be opened at all (ENXIO): say what it is rather than why not.
            // `stat` never blocks, whatever the file is.
            if let Ok(meta) = std::fs::metadata(actual)
                && let Some(kind) = irregular_kind(&meta.file_type())
            {
                return Err(FileError::NotRegular {
                    path: shown.to_path_buf(),
                    kind,
                });
            }
            return Err(FileError::io(shown, e));
        }
    };
    let meta = file.metadata().map_err(|e| FileError::io(shown, e))?;
    if let Some(kind) = irregular_kind(&meta.file_type()) {
        return Err(FileError::NotRegular {
            path: shown.to_path_buf(),
            kind,
        });
    }
    if meta.len() > max {
        return Err(FileError::TooLarge {
            path: shown.to_path_buf(),
            size: meta.len(),
            max,
        });
    }
    Ok((file, meta))
}

/// The bytes of the regular file `path`, at most `max` of them.
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let (file, meta) = open(path, max)?;
    read_opened(path, file, &meta, max)
}

/// The bytes of `file` (`path`, as `meta` described it when opened), at most `max` of them
/// even if it grew since.
fn read_opened(path: &Path, file: File, meta: &Metadata, max: u64) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::with_capacity(meta.len().min(max) as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// The text of the regular file `path` (UTF-8), at most `max` bytes.
pub fn read_to_string(path: &Path, max: u64) -> Result<String, FileError> {
    String::from_utf8(read(path, max)?).map_err(|_| FileError::NotText(path.to_path_buf()))
}

/// Open `path` as [`open`] does, if it is inside the folder `root` once every symlink on the
/// way is followed: a link to another file of `root` is fine, one that leads out of it (or a
/// `..` that does) is refused before the file is opened, and the file opened is checked again
/// (by the path the kernel has for it) so that a link swapped in meanwhile cannot lead out
/// either.
pub fn open_inside(path: &Path, root: &Path, max: u64) -> Result<(File, Metadata), FileError> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let outside = |target: PathBuf| FileError::Outside {
        path: path.to_path_buf(),
        root: root.clone(),
        target,
    };
    let real = path.canonicalize().map_err(|e| FileError::io(path, e))?;
    if !real.starts_with(&root) {
        return Err(outside(real));
    }
    let (file, meta) = open_as(path, &real, max)?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()));
        if let Ok(opened) = opened
            && !opened.starts_with(&root)
        {
            return Err(outside(opened));
        }
    }
    Ok((file, meta))
}

/// The bytes of the regular file `path`, at most `max` of them, if it is inside `root` (see
/// [`open_inside`]).
pub fn read_inside(path: &Path, root: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let (file, meta) = open_inside(path, root, max)?;
    read_opened(path, file, &meta, max)
}

/// The bytes of the regular file `path`, as [`read_inside`] reads them, if it has no other
/// hard link: for files of secrets. A hard link is a second name of the same file, possibly
/// outside `root` (the `.env` of another project on the same file system), which no symlink
/// check sees. Editors that save by writing a new file and renaming it over the old one keep
/// one link; so do `cp` and `git`.
pub fn read_own_inside(path: &Path, root: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    use std::os::unix::fs::MetadataExt;
    let (file, meta) = open_inside(path, root, max)?;
    if meta.nlink() > 1 {
        return Err(FileError::Linked {
            path: path.to_path_buf(),
            links: meta.nlink(),
        });
    }
    read_opened(path, file, &meta, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_devices_and_folders_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // Would block forever without O_NONBLOCK: no writer ever opens the FIFO.
        assert!(matches!(
            read(&fifo, 10),
            Err(FileError::NotRegular { kind: "FIFO", .. })
        ));
        assert!(matches!(
            read(Path::new("/dev/zero"), 10),
            Err(FileError::NotRegular {
                kind: "character device",
                ..
            })
        ));
        assert!(matches!(
            read(dir.path(), 10),
            Err(FileError::NotRegular {
                kind: "directory",
                ..
            })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(read(&link, 10), Err(FileError::NotRegular { .. })));
    }

    #[test]
    fn sizes_are_checked_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        let file = File::create(&big).unwrap();
        file.set_len(1 << 40).unwrap(); // sparse: a terabyte that takes no disk
        let error = read(&big, 1024).unwrap_err();
        assert!(matches!(error, FileError::TooLarge { .. }), "{error}");
        std::fs::write(&big, "hello").unwrap();
        assert_eq!(read_to_string(&big, 5).unwrap(), "hello");
        assert!(matches!(read(&big, 4), Err(FileError::TooLarge { .. })));
        assert!(matches!(
            read(&dir.path().join("absent"), 4),
            Err(FileError::NotFound(_))
        ));
        std::fs::write(&big, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_to_string(&big, 5),
            Err(FileError::NotText(_))
        ));
    }

    #[test]
    fn a_file_that_grows_after_fstat_is_read_only_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("growing");
        std::fs::write(&path, "12345").unwrap();
        let (file, meta) = open(&path, 8).unwrap();
        assert_eq!(meta.len(), 5);
        // Bigger at read time than fstat said: far past the bound.
        let mut more = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut more, &[b'x'; 1 << 20]).unwrap();
        let error = read_opened(&path, file, &meta, 8).unwrap_err();
        assert!(
            matches!(
                error,
                FileError::TooLarge {
                    size: 9,
                    max: 8,
                    ..
                }
            ),
            "{error}"
        );

        // The same while another thread keeps appending: the read stops at the bound.
        std::fs::write(&path, "").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut file = OpenOptions::new().append(true).open(&path).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::io::Write::write_all(&mut file, &[b'y'; 64 * 1024]).unwrap();
                }
            })
        };
        let max = 4 << 20;
        let mut refused = false;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            match read(&path, max) {
                Ok(bytes) => assert!(bytes.len() as u64 <= max),
                Err(FileError::TooLarge { .. }) => {
                    refused = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        assert!(refused);
    }

    #[test]
    fn sockets_and_symlink_loops_are_named_for_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("socket");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let error = read(&socket, 10).unwrap_err();
        assert!(
            matches!(error, FileError::NotRegular { kind: "socket", .. }),
            "{error}"
        );
        let a = dir.path().join("a");
        std::os::unix::fs::symlink(dir.path().join("b"), &a).unwrap();
        std::os::unix::fs::symlink(&a, dir.path().join("b")).unwrap();
        let error = read(&a, 10).unwrap_err().to_string();
        assert!(error.contains("a symlink loop"), "{error}");
        assert!(error.starts_with(&a.display().to_string()), "{error}");
    }

    #[test]
    fn files_inside_a_folder_may_link_within_it_but_not_out_of_it() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("project");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/real"), "inside").unwrap();
        std::fs::write(outer.path().join("secret"), "outside").unwrap();
        let link = |target: &Path, name: &str| {
            let at = root.join(name);
            std::os::unix::fs::symlink(target, &at).unwrap();
            at
        };
        assert_eq!(
            read_inside(&link(Path::new("sub/real"), "near"), &root, 100).unwrap(),
            b"inside"
        );
        assert_eq!(
            read_inside(&root.join("sub/../sub/real"), &root, 100).unwrap(),
            b"inside"
        );
        for path in [
            link(&outer.path().join("secret"), "far"),
            link(Path::new("../secret"), "up"),
            link(Path::new("/dev/zero"), "zero"),
            root.join("../secret"),
        ] {
            let error = read_inside(&path, &root, 100).unwrap_err();
            assert!(matches!(error, FileError::Outside { .. }), "{error}");
            let text = error.to_string();
            assert!(text.starts_with(&path.display().to_string()), "{text}");
            assert!(text.contains("leads outside the project folder"), "{text}");
        }
        // A folder linked out of the project takes its files out too.
        std::fs::create_dir_all(outer.path().join("elsewhere")).unwrap();
        std::fs::write(outer.path().join("elsewhere/file"), "x").unwrap();
        link(&outer.path().join("elsewhere"), "linked");
        assert!(matches!(
            read_inside(&root.join("linked/file"), &root, 100),
            Err(FileError::Outside { .. })
        ));
        // Inside, the usual checks still hold.
        let fifo = root.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(matches!(
            read_inside(&fifo, &root, 100),
            Err(FileError::NotRegular { kind: "FIFO", .. })
        ));
        assert!(matches!(
            read_inside(&root.join("sub/real"), &root, 3),
            Err(FileError::TooLarge { .. })
        ));
        assert!(matches!(
            read_inside(&root.join("absent"), &root, 3),
            Err(FileError::NotFound(_))
        ));
    }
}
