//! Files that are not what they seem (FIFOs, sockets, sparse giants, links to devices or out of
//! a folder), and `filerouter` run under a time and a memory limit, so that a test of a hang or
//! of a read without end fails instead of hanging, or of eating the machine's memory.

use std::{
    io::Read,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// Make a FIFO at `path` (nothing ever writes to it).
pub fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Make a sparse file of `len` bytes at `path`: as big as it says, taking no disk.
pub fn sparse(path: &Path, len: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// Make a Unix socket at `path` (the file stays after its listener is gone).
pub fn socket(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(path).unwrap());
}

/// Make a symlink at `at` to `target`.
pub fn symlink(target: impl AsRef<Path>, at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// Replace `path` the way an editor saves: `make` makes the new file beside it, which is then
/// renamed over it.
pub fn replace_with(path: &Path, make: impl FnOnce(&Path)) {
    let mut name = path.file_name().unwrap().to_os_string();
    name.push(".new");
    let new = path.with_file_name(name);
    let _ = std::fs::remove_file(&new);
    make(&new);
    std::fs::rename(&new, path).unwrap();
}

/// The resident memory of process `pid`, in bytes (`VmRSS`), if it still runs.
pub fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How a [`run_bounded`] run ended.
#[derive(Debug)]
pub struct Bounded {
    /// The exit code, `None` if it was killed (or died of a signal).
    pub code: Option<i32>,
    pub stderr: String,
    /// Why it was killed, if it was: it ran too long, or grew too big.
    pub killed: Option<String>,
    pub elapsed: Duration,
}

/// Run `filerouter ARGS` in `cwd` (without a cache key or `RUST_LOG` from the caller), and
/// kill it if it runs longer than `time` or its resident memory passes `memory` bytes.
pub fn run_bounded(args: &[&str], cwd: &Path, time: Duration, memory: u64) -> Bounded {
    let started = Instant::now();
    let mut child = Command::new(super::binary())
        .args(args)
        .current_dir(cwd)
        .env_remove("FILEROUTER_CACHE_KEY")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start filerouter");
    // Read as it comes, so that a full pipe never stops the child.
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });
    let mut killed = None;
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if started.elapsed() > time {
            killed = Some(format!("still running after {time:?}"));
        } else if let Some(bytes) = rss(child.id())
            && bytes > memory
        {
            killed = Some(format!(
                "{bytes} bytes resident, more than the {memory} allowed"
            ));
        }
        if killed.is_some() {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Bounded {
        code,
        stderr: reader.join().unwrap_or_default(),
        killed,
        elapsed: started.elapsed(),
    }
}

/// Copy the folder `from` to `to` (made if missing), leaving out entries named in `skip` at
/// any depth (`.packages`, `.cache`, `.data`, `__pycache__`, ...).
pub fn copy_tree(from: &Path, to: &Path, skip: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if skip.iter().any(|s| entry.file_name() == *s) {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, skip);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
