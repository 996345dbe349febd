//! Shared test support: fixture projects in temporary folders, and the real `filerouter` binary
//! started on them, spoken to over HTTP on loopback.

#![allow(dead_code)]

pub mod admin;
pub mod files;
pub mod otlp;
pub mod remote;
pub mod tools;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex, Once, OnceLock,
        mpsc::{self, Receiver},
    },
    time::{Duration, Instant},
};

pub use reqwest::blocking::Response;

/// The binary under test.
///
/// A link of its own to the file cargo built, made once: tests/wheel.rs runs cargo (through
/// maturin) while other tests start servers, and cargo replaces `target/release/filerouter`
/// (remove, then link again) even when nothing changed, so a server started in that moment
/// would find no file there.
pub fn binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let built = PathBuf::from(env!("CARGO_BIN_EXE_filerouter"));
            let own = lasting_tempdir().join("filerouter");
            if std::fs::hard_link(&built, &own).is_err() {
                std::fs::copy(&built, &own).expect("a copy of the filerouter binary");
            }
            own
        })
        .clone()
}

/// A temporary folder that lasts until this test binary exits, then is removed: for what a
/// test binary builds once and keeps in a `static`. A `TempDir` in a `static` is never dropped,
/// so its folder (a built project, its compiled code and memory images: hundreds of MB) would
/// outlive the run and fill the disk over a CI run.
pub fn lasting_tempdir() -> PathBuf {
    remove_at_exit(tempfile::tempdir().expect("tempdir").keep())
}

/// Remove `dir` when this process exits (normally, or by `std::process::exit` as the test
/// harness does when a test failed). Returns `dir`.
fn remove_at_exit(dir: PathBuf) -> PathBuf {
    static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    static HOOK: Once = Once::new();
    extern "C" fn remove_all() {
        if let Ok(dirs) = DIRS.lock() {
            for dir in dirs.iter() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
    // SAFETY: `remove_all` is a plain function that neither unwinds nor needs anything the
    // exit path has torn down (a `static` mutex, the file system).
    HOOK.call_once(|| unsafe {
        libc::atexit(remove_all);
    });
    DIRS.lock().unwrap().push(dir.clone());
    dir
}

/// A project folder made of `(path, content)` pairs, deleted when dropped.
pub struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    pub fn new(files: &[(&str, &str)]) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        let project = Project { dir };
        std::fs::create_dir_all(project.path().join("routes")).unwrap();
        for (rel, content) in files {
            project.write(rel, content);
        }
        project
    }

    /// A copy of the project folder `source` (an example), so a test may change it freely.
    /// A project of `files`, each text dedented first (`dedent`): for files written inline
    /// in a test, indented with the code around them.
    pub fn dedented(files: &[(&str, &str)]) -> Project {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(path, text)| (path.to_string(), dedent(text)))
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        Project::new(&refs)
    }

    pub fn copy_of(source: &Path) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_tree(source, dir.path());
        Project { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A project of `files` with its build cache made by the real `filerouter build` (for
    /// `run`).
    pub fn built(files: &[(&str, &str)]) -> Project {
        let project = Project::new(files);
        project.build();
        project
    }

    /// Make the project's build cache with the real `filerouter build`; panics, with its
    /// output, if the build fails.
    pub fn build(&self) {
        let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], self.path(), &[]);
        assert_eq!(code, 0, "build failed:\n{stdout}\n{stderr}");
    }

    /// Keep the folder until this test binary exits (see [`lasting_tempdir`]): for a project a
    /// `static` holds, which is never dropped.
    pub fn for_the_whole_run(self) -> PathBuf {
        remove_at_exit(self.dir.keep())
    }

    pub fn write(&self, rel: &str, content: &str) {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, dedent(content)).unwrap();
    }

    pub fn remove(&self, rel: &str) {
        std::fs::remove_file(self.path().join(rel)).unwrap();
    }
}

/// Copy the folder `from` to `to`, all of it (build caches too): for tests that serve copies
/// of projects built once.
pub fn copy_all(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_all(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".cache" || name == "__pycache__" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Remove the common leading indentation of a Rust string literal of Python code.
pub fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let indent = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    text.lines()
        .map(|l| {
            if l.len() >= indent {
                &l[indent..]
            } else {
                l.trim_start()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A running `filerouter` process, killed when dropped.
pub struct Server {
    child: Child,
    pub base: String,
    pub output: Arc<Mutex<Vec<String>>>,
}

static COMPILED: Once = Once::new();

/// Make sure the compiled guest is in the cache before tests start servers in parallel, so
/// that they do not all compile it at once.
fn ensure_compiled() {
    COMPILED.call_once(|| {
        let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
        let server = Server::spawn(&["dev"], project.path(), &[], Duration::from_secs(300));
        drop(server);
    });
}

impl Server {
    /// `filerouter dev` on `project`, on a free port.
    pub fn dev(project: &Project) -> Server {
        Self::dev_with_env(project, &[])
    }

    pub fn dev_with_env(project: &Project, env: &[(&str, &str)]) -> Server {
        ensure_compiled();
        Self::spawn(&["dev"], project.path(), env, Duration::from_secs(60))
    }

    /// `filerouter dev ARGS...` on `project`.
    pub fn dev_with_args(project: &Project, args: &[&str]) -> Server {
        ensure_compiled();
        let args: Vec<&str> = std::iter::once("dev").chain(args.iter().copied()).collect();
        Self::spawn(&args, project.path(), &[], Duration::from_secs(60))
    }

    /// `filerouter dev` on `project`, allowed to open at most `files` files (`ulimit -n`).
    pub fn dev_with_nofile(project: &Project, files: u32) -> Server {
        ensure_compiled();
        Self::spawn_with(
            Some(files),
            &["dev"],
            project.path(),
            &[],
            Duration::from_secs(60),
        )
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn spawn(args: &[&str], project: &Path, env: &[(&str, &str)], wait: Duration) -> Server {
        Self::spawn_with(None, args, project, env, wait)
    }

    fn spawn_with(
        files: Option<u32>,
        args: &[&str],
        project: &Path,
        env: &[(&str, &str)],
        wait: Duration,
    ) -> Server {
        let mut command = match files {
            // The shell sets the limit, then becomes filerouter (same pid).
            Some(files) => {
                let mut shell = Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
                    .arg(binary());
                shell
            }
            None => Command::new(binary()),
        };
        command.args(args).arg("--project").arg(project);
        // `dev` logs at info level unless the test's own environment says otherwise.
        let env: Vec<(&str, &str)> = match args.first() {
            Some(&"dev") => [("RUST_LOG", "info")].iter().chain(env).copied().collect(),
            _ => env.to_vec(),
        };
        Server::launch(command, &env, wait)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn get(&self, path: &str) -> Response {
        client().get(self.url(path)).send().expect("GET")
    }

    pub fn request(&self, method: &str, path: &str) -> reqwest::blocking::RequestBuilder {
        client().request(method.parse().unwrap(), self.url(path))
    }

    /// Everything the server printed so far.
    pub fn log(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    /// Wait (up to 60 s) until `dev` serves from its snapshot of the imported routes, or has said
    /// why it cannot: the snapshot is taken in the background after the start, and a test that
    /// measures the server's memory must not count it as the memory of what it measures.
    pub fn wait_for_snapshot(&self) {
        assert!(
            eventually(Duration::from_secs(60), || {
                let log = self.log();
                log.contains("routes imported once for every request")
                    || log.contains("every request imports the routes from source")
            }),
            "dev took no snapshot of the routes:\n{}",
            self.log()
        );
    }

    /// Whether the log shows `text` within 5 s: a request's log lines (its access line, an
    /// error noted as its answer is sent) may land just after the client has the answer.
    pub fn log_shows(&self, text: &str) -> bool {
        eventually(Duration::from_secs(20), || self.log().contains(text))
    }

    /// `filerouter run` on `project`'s build cache, on a free port.
    pub fn run(project: &Project, env: &[(&str, &str)]) -> Server {
        Self::spawn(&["run"], project.path(), env, Duration::from_secs(120))
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Send SIGTERM and wait (up to 30 s) for the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pump(
    stream: impl std::io::Read + Send + 'static,
    output: Arc<Mutex<Vec<String>>>,
    banner: Option<mpsc::Sender<String>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            // Recorded before the banner is announced, so that `log()` always holds it.
            output.lock().unwrap().push(line.clone());
            if let Some(tx) = &banner
                && line.contains("http://")
            {
                let _ = tx.send(line);
            }
        }
    });
}

fn wait_for_banner(
    rx: &Receiver<String>,
    child: &mut Child,
    output: &Arc<Mutex<Vec<String>>>,
    wait: Duration,
) -> String {
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(50)) {
            let start = line.find("http://").unwrap();
            let url = line[start..].split_whitespace().next().unwrap();
            return url.trim_end_matches('/').to_string();
        }
        if let Ok(Some(status)) = child.try_wait() {
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "filerouter exited ({status}) before serving:\n{}",
                output.lock().unwrap().join("\n")
            );
        }
        assert!(
            Instant::now() < deadline,
            "no banner within {wait:?}:\n{}",
            output.lock().unwrap().join("\n")
        );
    }
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An HTTP client that does not follow redirects.
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Run `filerouter` with `args` to completion; returns (exit code, stdout, stderr).
pub fn run(args: &[&str], cwd: &Path) -> (i32, String, String) {
    run_with_env(args, cwd, &[])
}

/// [`run`] with extra environment variables (and without an inherited cache key).
pub fn run_with_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let output = Command::new(binary())
        .args(args)
        .current_dir(cwd)
        .env_remove("FILEROUTER_CACHE_KEY")
        .envs(env.iter().copied())
        .output()
        .expect("run filerouter");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Poll `check` until it returns true or `timeout` passes.
/// `n` requests of a test that hunts for leftovers between requests, times
/// `FILEROUTER_HUNT_SCALE` (a whole number, default 1): the suite keeps each hunt to a minute of
/// CPU, and `bench/hunt.sh` runs the same tests ten times longer.
pub fn hunt(n: usize) -> usize {
    let scale = std::env::var("FILEROUTER_HUNT_SCALE")
        .ok()
        .map(|s| {
            s.parse::<usize>()
                .ok()
                .filter(|&k| k > 0)
                .unwrap_or_else(|| panic!("FILEROUTER_HUNT_SCALE={s}: a whole number from 1"))
        })
        .unwrap_or(1);
    n * scale
}

pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    check()
}

/// The response body as JSON.
pub fn json(response: Response) -> serde_json::Value {
    let text = response.text().expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

impl Server {
    /// Start `command` (filerouter with its arguments) on a free port, its output captured,
    /// without the caller's `RUST_LOG` and `FILEROUTER_CACHE_KEY` but with `env` added, and
    /// wait up to `wait` for its banner.
    fn launch(mut command: Command, env: &[(&str, &str)], wait: Duration) -> Server {
        command
            .args(["--port", "0"])
            .env_remove("RUST_LOG")
            .env_remove("FILEROUTER_CACHE_KEY");
        for (k, v) in env {
            command.env(k, v);
        }
        Server::launch_as_given(command, wait)
    }

    /// Start `command` as it is (its arguments, folder and environment already set) and wait
    /// up to `wait` for the banner.
    pub fn launch_as_given(mut command: Command, wait: Duration) -> Server {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("start filerouter");
        let output = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        pump(child.stdout.take().unwrap(), output.clone(), Some(tx));
        pump(child.stderr.take().unwrap(), output.clone(), None);
        let base = wait_for_banner(&rx, &mut child, &output, wait);
        Server {
            child,
            base,
            output,
        }
    }

    /// `filerouter ARGS --port 0`, waiting up to `wait` for the banner.
    pub fn start(args: &[&str], env: &[(&str, &str)], wait: Duration) -> Server {
        let mut command = Command::new(binary());
        command.args(args);
        Server::launch(command, env, wait)
    }
}

/// utime + stime of process `pid` (its threads' included): CPU a test can bound where a busy
/// machine would stretch wall time.
pub fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf is always safe to call.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}
