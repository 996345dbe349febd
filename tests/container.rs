//! The Dockerfile, checked without a Docker engine (none runs on these machines or in CI, and
//! no registry is reachable): its stages are run in a clean directory, one temporary folder per
//! stage's file system, and the last stage's CMD is started and spoken to over HTTP.
//!
//! - `COPY` from the build context copies from a clean copy of the repository: the files `git
//!   ls-files` lists (tracked, and new ones not ignored), less what `.dockerignore` leaves out.
//!   `COPY --from=STAGE` copies from that stage's folder. Absolute paths (COPY, WORKDIR, the
//!   CMD's arguments, ENV values) are mapped into the stage's folder.
//! - In the build stage, two kinds of `RUN` are not run: `cargo build --release --locked` (the
//!   test puts the release binary it tests, `CARGO_BIN_EXE_filerouter`, at
//!   `target/release/filerouter` in the stage's WORKDIR, where that build leaves it) and the
//!   `apt-get` installs (the packages come from the machine: python3 with venv). Every other
//!   `RUN` runs as written with `bash -c` in the stage's WORKDIR, with the ARG and ENV values
//!   set, and must use no absolute path (it would reach outside the stage's folder here).
//! - In the runtime stage, `RUN` may only `mkdir` (done, mapped), `useradd` (its home folder is
//!   made; the user is recorded) and `chown`/`chmod` (recorded: the test is not root).
//! - The CMD runs with the image's ENV only (and PATH and the user's HOME), its `--port`
//!   replaced by a free one, and its `--admin HOST:PORT` by `127.0.0.1:` and another. A
//!   `HEALTHCHECK ... CMD [...]` is run as written, its admin port mapped the same way.
//!
//! The recipes of `deploy/container/` (a project's own image, and `run --tenants`'s) are
//! replayed the same way, with a project as the whole build context (its own repository) and
//! the wheel tests/wheel.rs builds (once per suite run) in its `dist/`, named by the
//! `FILEROUTER_WHEEL` build argument: their build stage's `pip install` of it runs as written.
//!
//! examples/bookshop has no `public/`: the test adds one file to the context's copy of the
//! project, so that gathering `public/` into the image (and `build`'s note about it) is
//! exercised too.

use crate::support;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::json;
use support::{Server, client, free_port, tools::workspace};

/// One instruction of the Dockerfile, its variables not yet expanded.
#[derive(Debug, Clone)]
enum Step {
    Arg {
        name: String,
        default: Option<String>,
    },
    Env(Vec<(String, String)>),
    Workdir(String),
    Copy {
        from: Option<String>,
        sources: Vec<String>,
        dest: String,
    },
    Run(String),
    User(String),
    Volume(Vec<String>),
    Expose(Vec<String>),
    Cmd(Vec<String>),
    /// `HEALTHCHECK [OPTIONS] CMD [...]`: the command, in JSON form.
    Healthcheck(Vec<String>),
}

#[derive(Debug)]
struct Stage {
    image: String,
    name: Option<String>,
    steps: Vec<Step>,
}

fn dockerfile() -> Vec<Stage> {
    dockerfile_at("Dockerfile")
}

/// The stages of the Dockerfile at `path` (relative to the repository).
fn dockerfile_at(path: &str) -> Vec<Stage> {
    let text = fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse(&text)
}

/// The Dockerfile's stages. An instruction this test cannot replay fails it, so that the file
/// stays within what is checked here.
fn parse(text: &str) -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    for line in logical_lines(text) {
        let (keyword, rest) = line
            .split_once(char::is_whitespace)
            .map_or((line.as_str(), ""), |(k, r)| (k, r.trim()));
        let keyword = keyword.to_ascii_uppercase();
        if keyword == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let (image, name) = match words.as_slice() {
                [image] => (image.to_string(), None),
                [image, as_, name] if as_.eq_ignore_ascii_case("as") => {
                    (image.to_string(), Some(name.to_string()))
                }
                _ => panic!("FROM {rest}: expected `FROM IMAGE [AS NAME]`"),
            };
            stages.push(Stage {
                image,
                name,
                steps: Vec::new(),
            });
            continue;
        }
        let step = match keyword.as_str() {
            "ARG" => match rest.split_once('=') {
                Some((name, value)) => Step::Arg {
                    name: name.to_string(),
                    default: Some(unquote(value)),
                },
                None => Step::Arg {
                    name: rest.to_string(),
                    default: None,
                },
            },
            "ENV" => Step::Env(env_pairs(rest)),
            "WORKDIR" => Step::Workdir(rest.to_string()),
            "COPY" => {
                let mut words = list(rest);
                let mut from = None;
                while words.first().is_some_and(|w| w.starts_with("--")) {
                    let flag = words.remove(0);
                    if let Some(stage) = flag.strip_prefix("--from=") {
                        from = Some(stage.to_string());
                    } else if !flag.starts_with("--chown=") && !flag.starts_with("--chmod=") {
                        panic!("COPY {rest}: flag {flag} is not replayed by this test");
                    }
                }
                let dest = words.pop().expect("COPY needs a destination");
                assert!(!words.is_empty(), "COPY {rest}: no source");
                for source in &words {
                    assert!(
                        !source.contains(['*', '?', '[']),
                        "COPY {rest}: wildcards are not replayed by this test"
                    );
                }
                Step::Copy {
                    from,
                    sources: words,
                    dest,
                }
            }
            "RUN" => {
                assert!(
                    !rest.starts_with('['),
                    "RUN {rest}: write RUN in shell form"
                );
                Step::Run(rest.to_string())
            }
            "USER" => Step::User(rest.to_string()),
            "VOLUME" => Step::Volume(list(rest)),
            "EXPOSE" => Step::Expose(rest.split_whitespace().map(String::from).collect()),
            "HEALTHCHECK" => {
                let (_, command) = rest
                    .split_once("CMD ")
                    .unwrap_or_else(|| panic!("HEALTHCHECK {rest}: expected `... CMD [...]`"));
                Step::Healthcheck(serde_json::from_str(command.trim()).unwrap_or_else(|e| {
                    panic!("HEALTHCHECK {rest}: write its CMD in JSON form ({e})")
                }))
            }
            "CMD" => Step::Cmd(
                serde_json::from_str(rest)
                    .unwrap_or_else(|e| panic!("CMD {rest}: write it in JSON form ({e})")),
            ),
            other => panic!("Dockerfile instruction {other} is not replayed by tests/container.rs"),
        };
        stages
            .last_mut()
            .unwrap_or_else(|| panic!("{keyword} before the first FROM"))
            .steps
            .push(step);
    }
    stages
}

/// The instructions, one a line: comments and blank lines dropped, `\` continuations joined.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (current.is_empty() && trimmed.is_empty()) {
            continue;
        }
        match line.trim_end().strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                lines.push(current.trim().to_string());
                current.clear();
            }
        }
    }
    assert!(
        current.is_empty(),
        "the Dockerfile ends inside a continuation"
    );
    lines
}

/// A JSON array, or words separated by white space.
fn list(text: &str) -> Vec<String> {
    if text.starts_with('[') {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: not a JSON array ({e})"))
    } else {
        text.split_whitespace().map(String::from).collect()
    }
}

fn unquote(text: &str) -> String {
    let text = text.trim();
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
        .to_string()
}

/// `ENV K=V K2=V2` or the old `ENV K V`.
fn env_pairs(text: &str) -> Vec<(String, String)> {
    let first = text.split_whitespace().next().unwrap_or_default();
    if first.contains('=') {
        text.split_whitespace()
            .map(|pair| {
                let (k, v) = pair.split_once('=').expect("ENV K=V");
                (k.to_string(), unquote(v))
            })
            .collect()
    } else {
        let (k, v) = text.split_once(char::is_whitespace).expect("ENV K V");
        vec![(k.to_string(), unquote(v))]
    }
}

/// `$NAME` and `${NAME}` replaced by their values, as Docker does outside RUN.
fn expand(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').expect("unclosed ${");
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.push_str(vars.get(name).map(String::as_str).unwrap_or_default());
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// `.dockerignore`: patterns of path components (`*` and `?` within one, `**` for any
/// number); a path is left out when it or a folder above it matches.
struct Ignore(Vec<Vec<String>>);

impl Ignore {
    fn load() -> Ignore {
        Ignore::load_from(".dockerignore")
    }

    /// The `.dockerignore` at `path` (relative to the repository).
    fn load_from(path: &str) -> Ignore {
        let text = fs::read_to_string(workspace().join(path))
            .unwrap_or_else(|e| panic!("read {path}: {e}"));
        let mut patterns = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            assert!(
                !line.starts_with('!'),
                ".dockerignore: exceptions (!) are not replayed by this test"
            );
            patterns.push(
                line.split('/')
                    .filter(|c| !c.is_empty() && *c != ".")
                    .map(String::from)
                    .collect(),
            );
        }
        Ignore(patterns)
    }

    fn excludes(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        (1..=parts.len()).any(|n| self.0.iter().any(|p| components_match(p, &parts[..n])))
    }
}

fn components_match(pattern: &[String], parts: &[&str]) -> bool {
    match pattern.split_first() {
        None => parts.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=parts.len()).any(|skip| components_match(rest, &parts[skip..]))
        }
        Some((first, rest)) => {
            !parts.is_empty() && glob(first.as_bytes(), parts[0].as_bytes()) && {
                components_match(rest, &parts[1..])
            }
        }
    }
}

fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], name) || (!name.is_empty() && glob(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// The build context: a clean copy of the repository's files, as `docker build .` would send
/// them from a fresh clone.
fn context() -> tempfile::TempDir {
    let root = workspace();
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(&root)
        .output()
        .expect("git ls-files: this test copies the repository's files as git lists them");
    assert!(listed.status.success(), "git ls-files failed");
    let ignore = Ignore::load();
    let dir = tempfile::tempdir().expect("tempdir");
    let names: BTreeSet<&str> = listed
        .stdout
        .split(|b| *b == 0)
        .filter_map(|name| std::str::from_utf8(name).ok())
        .filter(|name| !name.is_empty() && !ignore.excludes(name))
        .collect();
    for name in names {
        let from = root.join(name);
        // Listed but deleted in the working tree: not in the context.
        let Ok(meta) = fs::symlink_metadata(&from) else {
            continue;
        };
        let to = dir.path().join(name);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&from).unwrap(), &to).unwrap();
        } else if meta.is_file() {
            fs::copy(&from, &to).unwrap();
        }
    }
    dir
}

/// `path` (absolute in the image, or relative to `workdir`) in the stage's folder `root`.
fn inside(root: &Path, workdir: &str, path: &str) -> PathBuf {
    let absolute = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", workdir.trim_end_matches('/'))
    };
    let mut out = root.to_path_buf();
    for part in absolute.split('/') {
        match part {
            "" | "." => {}
            ".." => panic!("{path}: `..` is not replayed by this test"),
            part => out.push(part),
        }
    }
    out
}

/// Docker's COPY of one source: a folder's contents go into `dest`; a file goes to `dest`, or
/// into it when `dest` ends with `/` (or is a folder already).
fn copy_source(source: &Path, dest: &Path, dest_is_dir: bool) {
    let meta = fs::symlink_metadata(source)
        .unwrap_or_else(|e| panic!("COPY source {} not found: {e}", source.display()));
    if meta.is_dir() {
        copy_dir(source, dest);
    } else {
        let target = if dest_is_dir || dest.is_dir() {
            dest.join(source.file_name().unwrap())
        } else {
            dest.to_path_buf()
        };
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        copy_entry(source, &target);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        copy_entry(&entry.path(), &to.join(entry.file_name()));
    }
}

fn copy_entry(from: &Path, to: &Path) {
    let kind = fs::symlink_metadata(from).unwrap().file_type();
    if kind.is_symlink() {
        std::os::unix::fs::symlink(fs::read_link(from).unwrap(), to).unwrap();
    } else if kind.is_dir() {
        copy_dir(from, to);
    } else {
        fs::copy(from, to).unwrap();
    }
}

/// A stage replayed: its folder and what its instructions left set.
struct Built {
    dir: tempfile::TempDir,
    workdir: String,
    vars: BTreeMap<String, String>,
    env: Vec<(String, String)>,
    user: Option<String>,
    users: BTreeSet<String>,
    owned: BTreeSet<String>,
    volumes: Vec<String>,
    cmd: Option<Vec<String>>,
    healthcheck: Option<Vec<String>>,
    /// Each RUN run and its output; each not run, and why.
    runs: Vec<String>,
}

impl Built {
    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, path: &str) -> PathBuf {
        inside(self.root(), &self.workdir, path)
    }
}

/// Replay `stage`. `built` are the stages before it, by name; `last` says it is the runtime
/// stage (whose RUN may only make users and folders).
fn replay(stage: &Stage, context: &Path, built: &BTreeMap<String, Built>, last: bool) -> Built {
    replay_with(stage, context, built, last, &BTreeMap::new())
}

/// [`replay`] with `--build-arg`s: `args` override the ARGs' defaults.
fn replay_with(
    stage: &Stage,
    context: &Path,
    built: &BTreeMap<String, Built>,
    last: bool,
    args: &BTreeMap<String, String>,
) -> Built {
    let mut out = Built {
        dir: tempfile::tempdir().expect("tempdir"),
        workdir: "/".to_string(),
        vars: BTreeMap::new(),
        env: Vec::new(),
        user: None,
        users: BTreeSet::new(),
        owned: BTreeSet::new(),
        volumes: Vec::new(),
        cmd: None,
        healthcheck: None,
        runs: Vec::new(),
    };
    for step in &stage.steps {
        match step {
            Step::Arg { name, default } => {
                let value = args
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| default.clone().unwrap_or_default());
                out.vars.insert(name.clone(), expand(&value, &out.vars));
            }
            Step::Env(pairs) => {
                for (k, v) in pairs {
                    let v = expand(v, &out.vars);
                    out.vars.insert(k.clone(), v.clone());
                    out.env.retain(|(name, _)| name != k);
                    out.env.push((k.clone(), v));
                }
            }
            Step::Workdir(dir) => {
                let dir = expand(dir, &out.vars);
                let absolute = if dir.starts_with('/') {
                    dir
                } else {
                    format!("{}/{dir}", out.workdir.trim_end_matches('/'))
                };
                fs::create_dir_all(inside(out.root(), "/", &absolute)).unwrap();
                out.workdir = absolute;
            }
            Step::Copy {
                from,
                sources,
                dest,
            } => {
                let dest_text = expand(dest, &out.vars);
                let dest = out.path(&dest_text);
                let dest_is_dir = dest_text.ends_with('/') || sources.len() > 1;
                for source in sources {
                    let source = expand(source, &out.vars);
                    let path = match from {
                        Some(stage) => {
                            let stage = built
                                .get(stage)
                                .unwrap_or_else(|| panic!("COPY --from={stage}: no such stage"));
                            inside(stage.root(), "/", &source)
                        }
                        None => inside(context, "/", &source),
                    };
                    copy_source(&path, &dest, dest_is_dir);
                }
            }
            Step::Run(command) if last => runtime_run(command, &mut out),
            Step::Run(command) => build_run(command, &mut out),
            Step::User(user) => out.user = Some(expand(user, &out.vars)),
            Step::Volume(paths) => {
                out.volumes
                    .extend(paths.iter().map(|p| expand(p, &out.vars)));
            }
            Step::Expose(_) => {}
            Step::Cmd(argv) => out.cmd = Some(argv.clone()),
            Step::Healthcheck(argv) => out.healthcheck = Some(argv.clone()),
        }
    }
    out
}

/// A build stage's RUN: run as written, except `cargo build` (the binary under test is put
/// where it leaves it) and apt-get (the machine has the packages).
fn build_run(command: &str, out: &mut Built) {
    let words = command.split_whitespace().collect::<Vec<_>>().join(" ");
    if words == "cargo build --release --locked" {
        let target = out.path("target/release/filerouter");
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::copy(support::binary(), &target).expect("put the release binary in the build stage");
        out.runs.push(format!(
            "not run: {words} (the binary under test put in its place)"
        ));
        return;
    }
    if words.starts_with("apt-get ") {
        out.runs
            .push(format!("not run: {words} (the machine's own packages)"));
        return;
    }
    for token in command.split(|c: char| c.is_whitespace() || ";&|()<>=\"'`".contains(c)) {
        assert!(
            !token.starts_with('/'),
            "RUN {command}: `{token}` is an absolute path; a build step's paths must be relative to its WORKDIR"
        );
    }
    let workdir = out.path(".");
    let bin = out.path("target/release");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let started = Instant::now();
    let output = Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(&workdir)
        .env_remove("FILEROUTER_CACHE_KEY")
        .envs(&out.vars)
        .env("PATH", path)
        .output()
        .expect("bash");
    let log = format!(
        "RUN {command}\n({:.1}s)\n{}{}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{log}\nfailed: {}", output.status);
    out.runs.push(log);
}

/// A runtime stage's RUN: `a && b && ...` of mkdir, useradd, chown and chmod only.
fn runtime_run(command: &str, out: &mut Built) {
    for part in command.split("&&") {
        let words: Vec<&str> = part.split_whitespace().collect();
        let args = || words[1..].iter().filter(|w| !w.starts_with('-'));
        match words.first().copied() {
            Some("mkdir") => {
                for dir in args() {
                    fs::create_dir_all(out.path(dir)).unwrap();
                }
            }
            Some("useradd") => {
                let mut name = None;
                let mut skip = false;
                for word in &words[1..] {
                    if skip {
                        skip = false;
                    } else if [
                        "-u",
                        "--uid",
                        "-g",
                        "--gid",
                        "-G",
                        "--groups",
                        "-s",
                        "--shell",
                        "-d",
                        "--home-dir",
                        "-c",
                        "--comment",
                    ]
                    .contains(word)
                    {
                        skip = true;
                    } else if !word.starts_with('-') {
                        name = Some(word.to_string());
                    }
                }
                let name = name.expect("useradd NAME");
                if words.contains(&"--create-home") || words.contains(&"-m") {
                    fs::create_dir_all(out.path(&format!("/home/{name}"))).unwrap();
                }
                out.users.insert(name);
            }
            Some("chown") => {
                let mut args = args();
                let owner = args.next().expect("chown OWNER PATH...");
                let user = owner.split(':').next().unwrap_or_default().to_string();
                for path in args {
                    out.owned.insert(format!("{user} {path}"));
                }
            }
            Some("chmod") => {}
            _ => panic!(
                "RUN {command}: `{}` in the runtime stage is not replayed by tests/container.rs (keep it to mkdir, useradd, chown, chmod)",
                part.trim()
            ),
        }
    }
    out.runs.push(format!("RUN {command} (interpreted)"));
}

/// The Dockerfile's default PATH for an image that sets none (Debian's).
const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The runtime stage's CMD, started: paths mapped into its folder, `--port` replaced.
struct Container {
    server: Server,
    port: u16,
    /// The port `--admin HOST:PORT` was given instead of its own, if the CMD has one.
    admin: Option<u16>,
}

impl Container {
    fn start(image: &Built) -> Container {
        let argv = image.cmd.clone().expect("the runtime stage has a CMD");
        let port = free_port();
        let path_var = image
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or(IMAGE_PATH.to_string(), |(_, v)| v.clone());
        let program = if argv[0].contains('/') {
            image.path(&argv[0])
        } else {
            path_var
                .split(':')
                .map(|dir| image.path(dir).join(&argv[0]))
                .find(|candidate| candidate.is_file())
                .unwrap_or_else(|| panic!("CMD {}: not on the image's PATH", argv[0]))
        };
        let mut args = Vec::new();
        let mut admin = None;
        let mut words = argv[1..].iter();
        while let Some(word) = words.next() {
            if word == "--port" {
                words.next().expect("--port VALUE");
                args.extend(["--port".to_string(), port.to_string()]);
            } else if word == "--admin" {
                words.next().expect("--admin HOST:PORT");
                let free = free_port();
                admin = Some(free);
                args.extend(["--admin".to_string(), format!("127.0.0.1:{free}")]);
            } else if word.starts_with('/') {
                args.push(image.path(word).display().to_string());
            } else {
                args.push(word.clone());
            }
        }
        let mut command = Command::new(&program);
        command
            .args(&args)
            .current_dir(image.path("."))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        if let Some(user) = &image.user {
            let home = image.path(&format!("/home/{user}"));
            if home.is_dir() {
                command.env("HOME", home);
            }
        }
        for (k, v) in &image.env {
            let value = if v.starts_with('/') {
                v.split(':')
                    .map(|p| image.path(p).display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            } else {
                v.clone()
            };
            command.env(k, value);
        }
        Container {
            // The guest is compiled at a container's first start: seconds, or a minute on a
            // machine that builds beside it.
            server: Server::launch_as_given(command, Duration::from_secs(180)),
            port,
            admin,
        }
    }

    /// `path` on the admin address.
    fn admin_url(&self, path: &str) -> String {
        let admin = self.admin.expect("the CMD has --admin");
        format!("http://127.0.0.1:{admin}{path}")
    }

    /// The image's HEALTHCHECK, run as Docker runs it (its admin port mapped): whether it passed.
    fn healthcheck(&self, image: &Built, image_admin_port: u16) -> (bool, String) {
        healthcheck(
            image,
            image_admin_port,
            self.admin.expect("the CMD has --admin"),
        )
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        self.server.log()
    }

    /// `docker stop`: SIGTERM, then the exit code.
    fn stop(mut self) -> Option<i32> {
        self.server.terminate()
    }
}

/// `image`'s HEALTHCHECK, run as Docker runs it, its admin port (`image_admin_port` in the
/// image) mapped to `admin`: whether it passed, and what it said.
fn healthcheck(image: &Built, image_admin_port: u16, admin: u16) -> (bool, String) {
    let argv = image.healthcheck.clone().expect("HEALTHCHECK");
    let argv: Vec<String> = argv
        .iter()
        .map(|a| {
            a.replace(
                &format!("127.0.0.1/{image_admin_port}"),
                &format!("127.0.0.1/{admin}"),
            )
        })
        .collect();
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("HEALTHCHECK {argv:?}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The ARG's default in the build stage.
fn project_arg(stages: &[Stage]) -> String {
    stages[0]
        .steps
        .iter()
        .find_map(|step| match step {
            Step::Arg {
                name,
                default: Some(value),
            } if name == "PROJECT" => Some(value.clone()),
            _ => None,
        })
        .expect("the build stage has ARG PROJECT=...")
}

/// Every name under `dir` (relative), files and folders.
fn names_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

#[test]
fn the_dockerfile_builds_an_image_that_serves_the_project_from_its_cache_alone() {
    let started = Instant::now();
    let stages = dockerfile();
    assert!(stages.len() >= 2, "a build stage and a runtime stage");
    let project = project_arg(&stages);
    assert_eq!(
        project, "examples/bookshop",
        "the requests below are the bookshop's: change them with the default PROJECT"
    );

    let context = context();
    // The bookshop has no public/; one file in the context's copy exercises its gathering.
    let public = context.path().join(&project).join("public");
    fs::create_dir_all(&public).unwrap();
    fs::write(public.join("robots.txt"), "User-agent: *\nDisallow:\n").unwrap();

    let mut built: BTreeMap<String, Built> = BTreeMap::new();
    let (runtime, rest) = stages.split_last().unwrap();
    for (i, stage) in rest.iter().enumerate() {
        assert!(
            !built.contains_key(&stage.image),
            "FROM {}: a stage built on another is not replayed",
            stage.image
        );
        let done = replay(stage, context.path(), &built, false);
        built.insert(stage.name.clone().unwrap_or_else(|| i.to_string()), done);
    }
    let image = replay(runtime, context.path(), &built, true);
    let steps = built
        .values()
        .chain([&image])
        .flat_map(|b| b.runs.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("{steps}");
    // The build stage's `filerouter build` said that public/ must travel beside .cache/.
    assert!(
        steps.contains("note: public/ (1 file, 24 bytes) is not in .cache/: `filerouter run` serves it from the project folder, so deploy public/ beside .cache/"),
        "{steps}"
    );

    // The image holds the binary, and of the project only .cache/, public/ and the data folder.
    let user = image.user.clone().expect("USER");
    assert!(
        image.users.contains(&user),
        "USER {user} is made by useradd"
    );
    let app = image.path("/app");
    let mut top: Vec<String> = fs::read_dir(&app)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, [".cache", ".data", "public"], "{}", app.display());
    for name in names_under(image.root()) {
        let last = name.rsplit('/').next().unwrap_or_default();
        assert!(
            !["routes", "config.py", ".packages", "requirements.txt"].contains(&last),
            "the image holds {name}"
        );
    }
    // The data folder is a volume the user owns, as is the compiled-code cache.
    let cache_dir = image
        .env
        .iter()
        .find(|(k, _)| k == "FILEROUTER_CACHE_DIR")
        .map(|(_, v)| v.clone())
        .expect("ENV FILEROUTER_CACHE_DIR");
    let data_dir = {
        let cmd = image.cmd.clone().unwrap();
        let at = cmd
            .iter()
            .position(|a| a == "--data-dir")
            .expect("--data-dir");
        cmd[at + 1].clone()
    };
    assert!(image.volumes.contains(&data_dir), "VOLUME {data_dir}");
    for dir in [&data_dir, &cache_dir] {
        assert!(image.path(dir).is_dir(), "{dir} is made in the image");
        assert!(
            image.owned.contains(&format!("{user} {dir}")),
            "{dir} is chowned to {user}: {:?}",
            image.owned
        );
    }

    let server = Container::start(&image);
    let http = client();
    let books = http.get(server.url("/books")).send().unwrap();
    assert_eq!(books.status(), 200, "{}", server.log());
    let books: serde_json::Value = books.json().unwrap();
    assert_eq!(books.as_array().map(Vec::len), Some(3), "{books}");
    let robots = http.get(server.url("/robots.txt")).send().unwrap();
    assert_eq!(robots.status(), 200);
    assert!(robots.text().unwrap().contains("User-agent"));
    // A token (PyJWT: the packages were baked into the cache), then a write to the kv store.
    let token: serde_json::Value = http
        .post(server.url("/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("username=alice&password=wonderland")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let token = token["access_token"].as_str().expect("a token").to_string();
    let created = http
        .post(server.url("/books"))
        .bearer_auth(&token)
        .json(&json!({"title": "Emma", "author": "Jane Austen", "price": 8}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201, "{}", server.log());
    let database = image.path(&data_dir).join("db.sqlite3");
    assert!(database.is_file(), "{} was not written", database.display());
    assert_eq!(server.stop(), Some(0), "SIGTERM stops it cleanly");

    // A new container on the same volume sees what the first one wrote.
    let server = Container::start(&image);
    let books: serde_json::Value = http
        .get(server.url("/books"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let titles: Vec<&str> = books
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["title"].as_str())
        .collect();
    assert_eq!(
        titles,
        ["Dune", "Cosmos", "SPQR", "Emma"],
        "{}",
        server.log()
    );
    assert_eq!(server.stop(), Some(0));
    eprintln!(
        "the Dockerfile replayed and served in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn the_image_runs_as_a_user_that_is_not_root_and_listens_where_it_says() {
    let stages = dockerfile();
    let runtime = stages.last().unwrap();
    let mut user = None;
    let mut exposed = Vec::new();
    let mut volumes = Vec::new();
    let mut cmd = None;
    for step in &runtime.steps {
        match step {
            Step::User(name) => user = Some(name.clone()),
            Step::Expose(ports) => exposed.extend(ports.iter().cloned()),
            Step::Volume(paths) => volumes.extend(paths.iter().cloned()),
            Step::Cmd(argv) => cmd = Some(argv.clone()),
            _ => {}
        }
    }
    let user = user.expect("the runtime stage sets USER");
    let name = user.split(':').next().unwrap_or_default();
    assert!(
        !name.is_empty() && name != "root" && name != "0",
        "USER {user} is root"
    );
    let cmd = cmd.expect("CMD");
    assert_eq!(cmd[..2], ["filerouter", "run"]);
    let flag = |flag: &str| {
        let at = cmd.iter().position(|a| a == flag);
        at.map(|at| cmd[at + 1].clone())
    };
    assert_eq!(flag("--host").as_deref(), Some("0.0.0.0"));
    let port = flag("--port").expect("--port");
    assert_eq!(exposed, std::slice::from_ref(&port), "EXPOSE {port}");
    let data = flag("--data-dir").expect("--data-dir");
    assert!(volumes.contains(&data), "VOLUME {data}");
    assert!(
        stages[..stages.len() - 1]
            .iter()
            .all(|s| s.image.contains("bookworm")),
        "the build stage is Debian bookworm, as the runtime"
    );
    assert!(runtime.image.starts_with("debian:bookworm"));
}

#[test]
fn dockerignore_leaves_out_build_output_and_local_state() {
    let ignore = Ignore::load();
    for left_out in [
        "target",
        "target/release/filerouter",
        ".git/HEAD",
        "tests/.venv/bin/python",
        "tests/.k8s-venv/bin/kubernetes-validate",
        "tests/browser/node_modules/playwright-core/package.json",
        "examples/bookshop/.cache/bundle.bin",
        "examples/bookshop/.data/db.sqlite3",
        "examples/bookshop/.packages/jwt/__init__.py",
        ".cache/bundle.bin",
    ] {
        assert!(ignore.excludes(left_out), "{left_out} is in the context");
    }
    for kept in [
        "Cargo.lock",
        "Dockerfile",
        "host/src/main.rs",
        "host/build.rs",
        "guest-python/sandbox/dispatcher.py",
        "examples/bookshop/config.py",
        "examples/bookshop/routes/index.py",
        "tests/container.rs",
    ] {
        assert!(!ignore.excludes(kept), "{kept} is left out of the context");
    }
}

/// Replay every stage of `stages` with `args` as `--build-arg`s: the runtime stage, and every
/// RUN's log.
fn build_image(
    stages: &[Stage],
    context: &Path,
    args: &BTreeMap<String, String>,
) -> (Built, String) {
    let mut built: BTreeMap<String, Built> = BTreeMap::new();
    let (runtime, rest) = stages.split_last().unwrap();
    for (i, stage) in rest.iter().enumerate() {
        let done = replay_with(stage, context, &built, false, args);
        built.insert(stage.name.clone().unwrap_or_else(|| i.to_string()), done);
    }
    let image = replay_with(runtime, context, &built, true, args);
    let steps = built
        .values()
        .chain([&image])
        .flat_map(|b| b.runs.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    (image, steps)
}

/// A project's own repository as the build context of a `deploy/container/` recipe: `project`
/// copied to `to` (without what builds and servers leave), and the wheel under test in `dist/`.
/// The `--build-arg`s that name it.
fn app_context(wheel: &Path, to: &Path) -> BTreeMap<String, String> {
    let name = wheel.file_name().unwrap().to_str().unwrap();
    fs::create_dir_all(to.join("dist")).unwrap();
    fs::copy(wheel, to.join("dist").join(name)).unwrap();
    BTreeMap::from([("FILEROUTER_WHEEL".to_string(), format!("dist/{name}"))])
}

/// What every recipe's runtime stage must be: a user that is not root and that useradd made,
/// owning the data folder (a VOLUME) and the compiled-code cache; no wheel left in it.
fn assert_runtime_basics(image: &Built, data_dir: &str) {
    let user = image.user.clone().expect("USER");
    assert!(!["root", "0"].contains(&user.as_str()), "USER {user}");
    assert!(
        image.users.contains(&user),
        "USER {user} is made by useradd"
    );
    assert!(
        image.volumes.iter().any(|v| v == data_dir),
        "VOLUME {data_dir}"
    );
    let cache_dir = image
        .env
        .iter()
        .find(|(k, _)| k == "FILEROUTER_CACHE_DIR")
        .map(|(_, v)| v.clone())
        .expect("ENV FILEROUTER_CACHE_DIR");
    for dir in [data_dir, &cache_dir] {
        assert!(image.path(dir).is_dir(), "{dir} is made in the image");
        assert!(
            image.owned.contains(&format!("{user} {dir}")),
            "{dir} is chowned to {user}: {:?}",
            image.owned
        );
    }
    for name in names_under(image.root()) {
        assert!(!name.ends_with(".whl"), "the image holds {name}");
    }
    assert!(
        image.path("/usr/local/bin/filerouter").is_file(),
        "the wheel's binary is at /usr/local/bin/filerouter"
    );
}

/// GET `url` until it answers 200 (up to 180 s: the guest is compiled at a container's first
/// start, and a tenant loaded at its first request): the last status and body.
fn until_ok(url: &str, host: Option<&str>) -> (u16, String) {
    let http = client();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let mut request = http.get(url);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        let (status, body) = match request.send() {
            Ok(r) => (r.status().as_u16(), r.text().unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        };
        if status == 200 || Instant::now() > deadline {
            return (status, body);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// deploy/container/Dockerfile, the recipe for a project's own repository, replayed on
/// examples/hello (with one package and one migration) and the wheel CI built: pip installs it
/// (no Rust), `packages install` and `build` run in the build stage, the migration Job's command works on the image, and the CMD serves
/// as a user that is not root, ready on its admin port, where the HEALTHCHECK passes.
#[test]
fn the_app_recipe_installs_the_wheel_builds_the_project_and_serves_it_with_probes() {
    const TEST: &str =
        "the_app_recipe_installs_the_wheel_builds_the_project_and_serves_it_with_probes";
    let Some(tools) = crate::wheel::tools(TEST) else {
        return;
    };
    let wheel = crate::wheel::wheel(&tools);
    let started = Instant::now();
    let stages = dockerfile_at("deploy/container/Dockerfile");
    let context = tempfile::tempdir().unwrap();
    support::files::copy_tree(
        &workspace().join("examples/hello"),
        context.path(),
        &[".packages", ".cache", ".data", "__pycache__"],
    );
    // One small pure-Python package, which `packages install` puts into .packages/ (the
    // bookshop's, which the Dockerfile's test installs, take half a minute more to build).
    fs::write(context.path().join("requirements.txt"), "six==1.17.0\n").unwrap();
    // One migration, which the migration Job (`db migrate`) applies.
    fs::create_dir_all(context.path().join("migrations")).unwrap();
    fs::write(
        context.path().join("migrations/0001_notes.sql"),
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);\n",
    )
    .unwrap();
    let args = app_context(&wheel, context.path());
    let (image, steps) = build_image(&stages, context.path(), &args);
    eprintln!("{steps}");
    assert!(
        steps.contains("filerouter 0.1.0"),
        "the wheel's binary ran: {steps}"
    );
    assert!(steps.contains("built "), "{steps}");
    assert_runtime_basics(&image, "/app/.data");
    // The project is in the image, built, with its packages for `db migrate` (Alembic's).
    for name in [
        ".cache/bundle.bin",
        "routes",
        "migrations/0001_notes.sql",
        ".packages/six.py",
    ] {
        assert!(image.path("/app").join(name).exists(), "/app/{name}");
    }

    // The Helm chart's migration Job: `filerouter db migrate --project /app`, here on the data
    // folder (a volume; in Kubernetes, the database URL from a Secret).
    let migrate = Command::new(image.path("/usr/local/bin/filerouter"))
        .args(["db", "migrate", "--project"])
        .arg(image.path("/app"))
        .arg("--data-dir")
        .arg(image.path("/app/.data"))
        // The image's user's: the guest it compiles is the one `run` then maps.
        .env("FILEROUTER_CACHE_DIR", image.path("/var/cache/filerouter"))
        .env("HOME", image.path("/home/filerouter"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&migrate.stdout),
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(
        migrate.status.success() && said.contains("0001_notes.sql"),
        "{said}"
    );

    let server = Container::start(&image);
    let (status, body) = until_ok(&server.admin_url("/readyz"), None);
    assert_eq!(status, 200, "{body}\n{}", server.log());
    assert_eq!(
        client()
            .get(server.admin_url("/livez"))
            .send()
            .unwrap()
            .status(),
        200
    );
    let (passed, said) = server.healthcheck(&image, 9090);
    assert!(passed, "HEALTHCHECK failed: {said}\n{}", server.log());
    let hello = client().get(server.url("/")).send().unwrap();
    assert_eq!(hello.status(), 200, "{}", server.log());
    assert_eq!(
        hello.json::<serde_json::Value>().unwrap(),
        json!({"message": "hello"})
    );
    // The admin port is not the public one.
    assert_eq!(
        client().get(server.url("/readyz")).send().unwrap().status(),
        404
    );
    let admin = server.admin.unwrap();
    assert_eq!(server.stop(), Some(0), "SIGTERM stops it cleanly");
    // With nothing listening there, the HEALTHCHECK fails.
    assert!(
        !healthcheck(&image, 9090, admin).0,
        "a HEALTHCHECK that cannot fail"
    );
    eprintln!(
        "deploy/container/Dockerfile replayed and served in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// deploy/container/Dockerfile.tenants: a repository of a tenants file and its projects, each
/// built in the build stage, served by `run --tenants` by host, with the same probes.
#[test]
fn the_tenants_recipe_builds_every_project_and_serves_them_by_host() {
    const TEST: &str = "the_tenants_recipe_builds_every_project_and_serves_them_by_host";
    let Some(tools) = crate::wheel::tools(TEST) else {
        return;
    };
    let wheel = crate::wheel::wheel(&tools);
    let started = Instant::now();
    let stages = dockerfile_at("deploy/container/Dockerfile.tenants");
    let context = tempfile::tempdir().unwrap();
    support::files::copy_tree(
        &workspace().join("examples/hello"),
        &context.path().join("sites/hello"),
        &[".packages", ".cache", ".data", "__pycache__"],
    );
    // Not a project (no routes/): skipped by the build loop.
    fs::create_dir_all(context.path().join("sites/shared")).unwrap();
    fs::write(
        context.path().join("tenants.toml"),
        "[tenant.hello]\nhosts = [\"hello.test\"]\nproject = \"sites/hello\"\ndata_dir = \".data/hello\"\n",
    )
    .unwrap();
    let args = app_context(&wheel, context.path());
    let (image, steps) = build_image(&stages, context.path(), &args);
    eprintln!("{steps}");
    assert_runtime_basics(&image, "/srv/tenants/.data");
    assert!(
        image
            .path("/srv/tenants/sites/hello/.cache/bundle.bin")
            .is_file(),
        "{steps}"
    );
    let cmd = image.cmd.clone().unwrap();
    assert!(
        cmd.windows(2)
            .any(|w| w[0] == "--tenants" && w[1] == "/srv/tenants/tenants.toml"),
        "{cmd:?}"
    );

    let server = Container::start(&image);
    let (status, body) = until_ok(&server.url("/"), Some("hello.test"));
    assert_eq!(status, 200, "{body}\n{}", server.log());
    let unknown = client()
        .get(server.url("/"))
        .header("host", "other.test")
        .send()
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let (status, body) = until_ok(&server.admin_url("/readyz"), None);
    assert_eq!(status, 200, "{body}");
    let (passed, said) = server.healthcheck(&image, 9090);
    assert!(passed, "HEALTHCHECK failed: {said}\n{}", server.log());
    assert!(
        image.path("/srv/tenants/.data/hello").is_dir(),
        "the tenant's data folder is on the volume"
    );
    assert_eq!(server.stop(), Some(0));
    eprintln!(
        "deploy/container/Dockerfile.tenants replayed and served in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn the_recipes_dockerignore_keeps_the_project_and_its_wheel_and_leaves_out_local_state() {
    let ignore = Ignore::load_from("deploy/container/.dockerignore");
    for left_out in [
        ".git/HEAD",
        ".data/db.sqlite3",
        ".cache/bundle.bin",
        ".packages/jwt/__init__.py",
        "sites/acme/.data/kv.sqlite3",
        "sites/acme/.cache/manifest.json",
        ".venv/bin/python",
        "routes/__pycache__/index.cpython-312.pyc",
    ] {
        assert!(ignore.excludes(left_out), "{left_out} is in the context");
    }
    for kept in [
        "Dockerfile",
        "config.py",
        "routes/index.py",
        "public/robots.txt",
        "migrations/0001_notes.sql",
        "alembic/env.py",
        "requirements.txt",
        "tenants.toml",
        "sites/acme/routes/index.py",
        "dist/filerouter-0.1.0-py3-none-manylinux_2_34_x86_64.whl",
    ] {
        assert!(!ignore.excludes(kept), "{kept} is left out of the context");
    }
}
