//! Support for the tests of `run --tenants --admin` under hostile load (`tests/hostile_admin.rs`):
//! built fixture projects, a server started with a bounded open-file limit, and what the tests
//! look at from outside: the server's open descriptors and sockets (`/proc/PID/fd`), its
//! open-file limit (`prlimit`), connections the server closes, raw HTTP/1.1 exchanges.
//!
//! `FILEROUTER_TEST_BINARY` names another `filerouter` to start instead of the one under test
//! (to see the tests fail on a build without a fix).

use std::{
    collections::HashMap,
    io::{ErrorKind, Read, Write},
    net::TcpStream,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use super::{Server, eventually};

/// The binary the tests start: `FILEROUTER_TEST_BINARY` if set, else the one under test.
pub fn binary() -> PathBuf {
    std::env::var_os("FILEROUTER_TEST_BINARY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(super::binary)
}

/// The project made of `files`, built once per test binary with the real `filerouter build`
/// (under `kind`, a name for the file set); tests copy it.
pub fn built(kind: &str, files: &[(&str, &str)]) -> PathBuf {
    type Builds = Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>;
    static BUILT: OnceLock<Builds> = OnceLock::new();
    let once = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(kind.to_string())
        .or_default()
        .clone();
    once.get_or_init(|| {
        let dir = super::lasting_tempdir();
        for (rel, content) in files {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, super::dedent(content)).unwrap();
        }
        let (code, stdout, stderr) = super::run_with_env(&["build", "--project", "."], &dir, &[]);
        assert_eq!(code, 0, "build of {kind}:\n{stdout}\n{stderr}");
        dir
    })
    .clone()
}

/// A folder with copies of built projects (their caches included) and a tenants file.
pub struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    /// `projects`: (folder name, built project to copy); `toml`: the tenants file.
    pub fn new(projects: &[(&str, &Path)], toml: &str) -> Site {
        let dir = tempfile::tempdir().unwrap();
        for (name, from) in projects {
            super::copy_all(from, &dir.path().join(name));
        }
        std::fs::write(dir.path().join("tenants.toml"), super::dedent(toml)).unwrap();
        Site { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `filerouter run --tenants tenants.toml --admin 127.0.0.1:0`, with `env`; allowed to open
    /// at most `nofile` files (soft and hard limit) if given.
    pub fn start(&self, nofile: Option<u64>, env: &[(&str, &str)]) -> Server {
        self.start_with(&[], nofile, env)
    }

    /// [`Site::start`] with more arguments for `run` (`--workers 1`).
    pub fn start_with(&self, args: &[&str], nofile: Option<u64>, env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(binary());
        command
            .arg("run")
            .arg("--tenants")
            .arg(self.path().join("tenants.toml"))
            .args(["--admin", "127.0.0.1:0"])
            .args(args);
        if let Some(files) = nofile {
            let limit = libc::rlimit {
                rlim_cur: files,
                rlim_max: files,
            };
            // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        Server::launch(command, env, Duration::from_secs(120))
    }
}

/// The public port's `host:port`.
pub fn public_address(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// The admin port's `host:port`, from the line `run` prints.
pub fn admin_address(server: &Server) -> String {
    let mut address = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            address = server
                .log()
                .lines()
                .find(|l| l.contains("admin endpoint at"))
                .and_then(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
                .map(|w| {
                    w.trim_start_matches("http://")
                        .trim_end_matches("/metrics")
                        .to_string()
                });
            address.is_some()
        }),
        "no admin address in\n{}",
        server.log()
    );
    address.unwrap()
}

/// The value of the first line of admin metrics `text` that starts with `prefix` (a family and
/// its labels); panics, showing the text, when there is none.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.split_whitespace().last())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
}

/// A client that gives up after `timeout`.
pub fn client(timeout: Duration) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .build()
        .unwrap()
}

/// GET `path` on the public port as `host`: status and body, or `None` if no answer came
/// within 5 s.
pub fn get(server: &Server, host: &str, path: &str) -> Option<(u16, String)> {
    let response = client(Duration::from_secs(5))
        .get(server.url(path))
        .header("host", host)
        .send()
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().unwrap_or_default()))
}

/// GET `/healthz` on the admin port: its JSON, or `None` if no answer came within `timeout`.
pub fn healthz(server: &Server, timeout: Duration) -> Option<serde_json::Value> {
    let response = client(timeout)
        .get(format!("http://{}/healthz", admin_address(server)))
        .send()
        .ok()?;
    assert_eq!(response.status(), 200);
    serde_json::from_str(&response.text().ok()?).ok()
}

/// The names `/healthz` lists as refused.
pub fn refused(health: &serde_json::Value) -> Vec<String> {
    health["refused"]
        .as_array()
        .unwrap_or_else(|| panic!("no refused list in {health}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// How many descriptors process `pid` has open.
pub fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// How many sockets process `pid` has open (listeners included).
pub fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

/// Set the soft open-file limit of process `pid` (as `prlimit --pid` does); returns the old
/// soft limit.
pub fn set_soft_nofile(pid: u32, soft: u64) -> u64 {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads `new` and writes `old`, both valid for the call.
    let read = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(read, 0, "prlimit: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above.
    let set = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &new,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "prlimit: {}", std::io::Error::last_os_error());
    old.rlim_cur
}

/// Whether the server closes `stream` before `deadline` (the read sees the end, or a reset).
pub fn closed_before(stream: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an answer (a 408, say) before the close
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true, // reset
        }
    }
}

/// Send `request` on `stream` and read one answer (with a `Content-Length`) within 10 s:
/// its status, its head (lowercase) and its body.
pub fn exchange(stream: &mut TcpStream, request: &str) -> (u16, String, String) {
    stream.write_all(request.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if bytes.len() >= end + 4 + length {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("no status in {head:?}"));
                let body = String::from_utf8_lossy(&bytes[end + 4..end + 4 + length]).into_owned();
                return (status, head, body);
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => panic!(
                "connection closed before a whole answer: {:?}",
                String::from_utf8_lossy(&bytes)
            ),
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "no whole answer ({e}): {:?}",
                String::from_utf8_lossy(&bytes)
            ),
        }
    }
}
