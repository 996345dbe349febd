//! Reading files that someone other than the server controls, without trusting their kind or
//! size.
//!
//! A project folder (or its build cache) may hold a FIFO, a device, a symlink to `/dev/zero`,
//! or a file of many gigabytes where a source file or a cache is expected. Every file the host
//! reads from a project goes through here: it is opened with `O_NONBLOCK` (so opening a FIFO
//! never waits for a writer), checked with `fstat` to be a regular file, and its size is
//! checked against a bound before a byte is read (and the read stops at the bound should the
//! file grow meanwhile).
//!
//! These calls block on the file system: call them from `spawn_blocking` or outside the async
//! runtime, never on its threads. What the bytes mean is the caller's business.

use std::{
    fs::{File, Metadata, OpenOptions},
    io::Read,
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{}: no such file", .0.display())]
    NotFound(PathBuf),
    #[error("{}: not a regular file (a {kind}); only regular files are read", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{}: {size} bytes, more than the {max} bytes allowed for it", path.display())]
    TooLarge { path: PathBuf, size: u64, max: u64 },
    #[error("{}: not UTF-8 text", .0.display())]
    NotText(PathBuf),
    #[error("{}: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
}

impl FileError {
    fn io(path: &Path, e: std::io::Error) -> FileError {
        if e.kind() == std::io::ErrorKind::NotFound {
            FileError::NotFound(path.to_path_buf())
        } else {
            FileError::Io {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        }
    }
}

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
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| FileError::io(path, e))?;
    let meta = file.metadata().map_err(|e| FileError::io(path, e))?;
    if let Some(kind) = irregular_kind(&meta.file_type()) {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    if meta.len() > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            max,
        });
    }
    Ok((file, meta))
}

/// The bytes of the regular file `path`, at most `max` of them.
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let (file, meta) = open(path, max)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
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

/// The most a Python source file the host reads (`config.py`, root files, route files baked
/// by `build`) may hold.
pub const MAX_SOURCE_BYTES: u64 = 16 * 1024 * 1024;

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
}
