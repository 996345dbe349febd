//! Every file the host reads is checked (issue 30, points 5 to 7): a tenants file, a plugin's
//! component or WIT file that is a FIFO, a device, a socket, a symlink loop, a sparse file of
//! gigabytes, or a link out of the project is refused at once with a message naming the file
//! and what is wrong with it. Nothing hangs, nothing is read whole, and `run --tenants` keeps
//! its last good configuration and its watcher going.
//!
//! Each child runs under a time and a memory limit ([`files::run_bounded`]): a hang or a read
//! without end fails the test instead of hanging it or eating the machine's memory.

use crate::support;

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Duration,
};

use support::{Project, Server, eventually, files, run_with_env};

/// No refusal here needs more than this long...
const TIME: Duration = Duration::from_secs(60);
/// ...or this much memory (a read of `/dev/zero` passes it in about a second).
const MEMORY: u64 = 1 << 30;

/// 3 GB, as the issue's attack.
const HUGE: u64 = 3 << 30;

/// Makes a hostile file at the path it is given.
type Make<'a> = Box<dyn Fn(&Path) + 'a>;

// ---------------------------------------------------------------------------------------------
// The tenants file

/// One tenant, built once by the real `filerouter build`; `run --tenants` serves it.
fn built_tenant() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = support::lasting_tempdir();
            let project = dir.join("a");
            std::fs::create_dir_all(project.join("routes")).unwrap();
            std::fs::write(
                project.join("routes/index.py"),
                "def GET(request):\n    return {'tenant': 'a'}\n",
            )
            .unwrap();
            let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], &project, &[]);
            assert_eq!(code, 0, "build:\n{stdout}\n{stderr}");
            dir
        })
        .as_path()
}

fn tenants(hosts: &[&str]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("{h:?}")).collect();
    format!(
        "[tenant.a]\nhosts = [{}]\nproject = \"a\"\n",
        hosts.join(", ")
    )
}

fn status(server: &Server, host: &str) -> u16 {
    server
        .request("GET", "/")
        .header("host", host)
        .timeout(Duration::from_secs(20))
        .send()
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// Tenants files that are not small regular files: what each is, how to make it at a path,
/// and what the error says.
fn not_regular_tenants_files() -> Vec<(&'static str, Make<'static>, &'static str)> {
    vec![
        (
            "a FIFO",
            Box::new(files::mkfifo),
            "not a regular file (a FIFO)",
        ),
        (
            "a link to /dev/zero",
            Box::new(|p| files::symlink("/dev/zero", p)),
            "not a regular file (a character device)",
        ),
        (
            "a sparse 3 GB file",
            Box::new(|p| files::sparse(p, HUGE)),
            "3221225472 bytes, more than the 1048576 bytes allowed",
        ),
        (
            "a socket",
            Box::new(files::socket),
            "not a regular file (a socket)",
        ),
    ]
}

#[test]
fn a_tenants_file_that_is_not_a_small_regular_file_stops_run_at_once_naming_it() {
    let mut cases = not_regular_tenants_files();
    cases.push((
        "a symlink loop",
        Box::new(|p| {
            files::symlink("loop.toml", p);
            files::symlink("tenants.toml", &p.with_file_name("loop.toml"));
        }),
        "a symlink loop",
    ));
    for (what, make, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        make(&dir.path().join("tenants.toml"));
        let run = files::run_bounded(
            &["run", "--tenants", "tenants.toml", "--port", "0"],
            dir.path(),
            TIME,
            MEMORY,
        );
        assert_eq!(run.killed, None, "{what}: {}", run.stderr);
        assert!(
            run.code.is_some_and(|c| c != 0),
            "{what}: {:?}\n{}",
            run.code,
            run.stderr
        );
        assert!(
            run.stderr.contains("tenants.toml:1: cannot read: ") && run.stderr.contains(expected),
            "{what}: expected {expected:?} in:\n{}",
            run.stderr
        );
        assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    }
}

#[test]
fn a_tenants_file_swapped_for_a_fifo_a_device_or_a_giant_while_run_serves_keeps_the_last_good_one()
{
    let site = tempfile::tempdir().unwrap();
    let project = site.path().join("a");
    support::copy_all(&built_tenant().join("a"), &project);
    let config = site.path().join("tenants.toml");
    std::fs::write(&config, tenants(&["a.test"])).unwrap();
    let server = Server::start(
        &["run", "--tenants", config.to_str().unwrap()],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(status(&server, "a.test"), 200, "{}", server.log());
    assert_eq!(status(&server, "b.test"), 404);

    let swaps = not_regular_tenants_files();
    for (round, (what, make, expected)) in swaps.into_iter().enumerate() {
        files::replace_with(&config, make);
        // Logged, with the file; the last good configuration keeps serving.
        assert!(
            eventually(Duration::from_secs(15), || server.log().lines().any(|l| {
                l.contains("tenants.toml:1: cannot read: ")
                    && l.contains(expected)
                    && l.contains("keeping the last good configuration")
            })),
            "{what}: not logged (is the watcher stuck?):\n{}",
            server.log()
        );
        assert_eq!(status(&server, "a.test"), 200, "{what}\n{}", server.log());
        let rss = files::rss(server.pid()).unwrap();
        assert!(rss < MEMORY, "{what}: {rss} bytes resident");

        // The watcher is not stuck: a good edit after it is picked up.
        let (now, gone) = if round % 2 == 0 {
            ("b.test", "c.test")
        } else {
            ("c.test", "b.test")
        };
        files::replace_with(&config, |p| {
            std::fs::write(p, tenants(&["a.test", now])).unwrap()
        });
        assert!(
            eventually(Duration::from_secs(15), || status(&server, now) == 200),
            "{what}: the good edit after it was not picked up:\n{}",
            server.log()
        );
        assert_eq!(status(&server, gone), 404, "{what}");
    }
}

// ---------------------------------------------------------------------------------------------
// A plugin's files

const CONFIG: &str = r#"plugins = {"probe": {"component": "plugins/probe/probe.wasm"}}"#;
const COMPONENT: &str = "plugins/probe/probe.wasm";
const WIT: &str = "plugins/probe/wit/probe.wit";
const WIT_DEP: &str = "plugins/probe/wit/deps/dep.wit";

/// A project with plugin `probe` declared: its WIT is good, its component is not a component
/// (every case here is refused before the component is compiled).
fn plugin_project() -> Project {
    Project::new(&[
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        ("config.py", CONFIG),
        (
            WIT,
            "package test:probe@1.0.0;\n\ninterface echo {\n    nothing: func();\n}\n",
        ),
        (COMPONENT, "not a component"),
    ])
}

/// `filerouter build` of `project`, which must stop at once: its stderr.
fn build_refused(project: &Project, what: &str) -> String {
    let run = files::run_bounded(&["build", "--project", "."], project.path(), TIME, MEMORY);
    assert_eq!(run.killed, None, "{what}: {}", run.stderr);
    assert!(
        run.code.is_some_and(|c| c != 0),
        "{what}: {:?}\n{}",
        run.code,
        run.stderr
    );
    assert!(
        !project.path().join(".cache").exists(),
        "{what}: a cache was written"
    );
    run.stderr
}

#[test]
fn a_plugin_file_that_is_not_a_small_regular_file_inside_the_project_stops_build_at_once() {
    let elsewhere = tempfile::tempdir().unwrap();
    let outside: PathBuf = elsewhere.path().join("outside.wasm");
    std::fs::write(&outside, "not a component either").unwrap();
    let cases: Vec<(&str, &str, Make<'_>, &str)> = vec![
        (
            "a component that is a FIFO",
            COMPONENT,
            Box::new(files::mkfifo),
            "not a regular file (a FIFO)",
        ),
        (
            "a component linked to /dev/zero",
            COMPONENT,
            Box::new(|p| files::symlink("/dev/zero", p)),
            "leads outside the project folder",
        ),
        (
            "a sparse 3 GB component",
            COMPONENT,
            Box::new(|p| files::sparse(p, HUGE)),
            "3221225472 bytes, more than the 134217728 bytes allowed",
        ),
        (
            "a component linked out of the project",
            COMPONENT,
            Box::new(|p| files::symlink(&outside, p)),
            "leads outside the project folder",
        ),
        (
            "a component linked out of the project by a relative link",
            COMPONENT,
            // `..` past `/` stays at `/`: up out of the project, then down to `outside`.
            Box::new(|p| files::symlink("../".repeat(32) + outside.to_str().unwrap(), p)),
            "leads outside the project folder",
        ),
        (
            "a WIT file that is a FIFO",
            WIT,
            Box::new(files::mkfifo),
            "not a regular file (a FIFO)",
        ),
        (
            "a WIT file of deps/ that is a FIFO",
            WIT_DEP,
            Box::new(files::mkfifo),
            "not a regular file (a FIFO)",
        ),
        (
            "a WIT file linked to /dev/zero",
            WIT,
            Box::new(|p| files::symlink("/dev/zero", p)),
            "leads outside the project folder",
        ),
        (
            "a sparse 3 GB WIT file",
            WIT,
            Box::new(|p| files::sparse(p, HUGE)),
            "3221225472 bytes, more than the 1048576 bytes allowed",
        ),
    ];
    for (what, file, make, expected) in cases {
        let project = plugin_project();
        let path = project.path().join(file);
        let _ = std::fs::remove_file(&path);
        make(&path);
        let stderr = build_refused(&project, what);
        assert!(
            stderr.contains(&format!("plugin `probe`: {file}: {expected}")),
            "{what}: expected `{file}: {expected}` in:\n{stderr}"
        );
    }

    // A link to another file of the project is fine: the component is read (and found not to
    // be a component), and so is a WIT file linked elsewhere in the project.
    let project = plugin_project();
    let at = |rel: &str| project.path().join(rel);
    std::fs::create_dir_all(at("shared/wit")).unwrap();
    std::fs::rename(at(COMPONENT), at("shared/probe.wasm")).unwrap();
    files::symlink("../../shared/probe.wasm", &at(COMPONENT));
    std::fs::rename(at(WIT), at("shared/wit/probe.wit")).unwrap();
    files::symlink(at("shared/wit/probe.wit"), &at(WIT));
    let stderr = build_refused(&project, "links inside the project");
    assert!(
        stderr.contains(&format!(
            "plugin `probe`: {COMPONENT} is not a usable WebAssembly component"
        )),
        "{stderr}"
    );
}
