//! Plugins: WebAssembly components with WIT interfaces of their own, called from route code
//! through `filerouter.plugins`. Every WIT type both ways, every failure path's error, escape
//! attempts from inside a plugin, no state across requests, loading errors in dev and build,
//! the build cache (run reads no plugins/), hot reload, stubs, and the example project.
//!
//! The test plugin (`probe`, Python, built with the pinned componentize-py) echoes every plain
//! WIT type and probes its own sandbox; it is built once per run of this file.

use crate::support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::Duration,
};

use serde_json::{Value, json};
use support::{Project, Server, eventually, run};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn componentize_py() -> PathBuf {
    std::env::var_os("FILEROUTER_COMPONENTIZE_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/guest-tools/venv-0.25.1/bin/componentize-py"))
}

const PROBE_WIT: &str = r#"
package test:probe@1.0.0;

/// Every plain WIT type, echoed back.
interface echo {
    record point { x: s32, y: s32, label: option<string> }
    enum color { red, dark-green, blue }
    flags perms { read, write, exec-all }
    variant shape { circle(f64), rect(tuple<u32, u32>), empty }

    echo-bool: func(v: bool) -> bool;
    echo-u8: func(v: u8) -> u8;
    echo-s8: func(v: s8) -> s8;
    echo-u16: func(v: u16) -> u16;
    echo-s16: func(v: s16) -> s16;
    echo-u32: func(v: u32) -> u32;
    echo-s32: func(v: s32) -> s32;
    echo-u64: func(v: u64) -> u64;
    echo-s64: func(v: s64) -> s64;
    echo-f32: func(v: f32) -> f32;
    echo-f64: func(v: f64) -> f64;
    echo-char: func(v: char) -> char;
    echo-string: func(v: string) -> string;
    echo-bytes: func(v: list<u8>) -> list<u8>;
    echo-list: func(v: list<string>) -> list<string>;
    echo-points: func(v: list<point>) -> list<point>;
    echo-record: func(v: point) -> point;
    echo-tuple: func(v: tuple<string, u8, bool>) -> tuple<string, u8, bool>;
    echo-option: func(v: option<u32>) -> option<u32>;
    echo-enum: func(v: color) -> color;
    echo-flags: func(v: perms) -> perms;
    echo-variant: func(v: shape) -> shape;
    echo-results: func(v: list<result<u8, string>>) -> list<result<u8, string>>;
    /// `a / b`, or an error when `b` is 0.
    divide: func(a: s32, b: s32) -> result<s32, string>;
    fail-with: func(c: color) -> result<_, color>;
    nothing: func();
    describe: func(p: point, c: color, tags: list<string>) -> string;
}

/// Attempts to leave the plugin's sandbox, and state that must not outlive a request.
interface probe {
    read-file: func(path: string) -> result<string, string>;
    list-dir: func(path: string) -> result<list<string>, string>;
    write-file: func(path: string, text: string) -> result<_, string>;
    env: func() -> list<tuple<string, string>>;
    connect: func(host: string, port: u16) -> result<_, string>;
    now: func() -> f64;
    counter: func() -> u32;
    spin: func();
    hog: func(mb: u32) -> u32;
    crash: func(message: string);
    kv-incr: func(key: string) -> result<s64, string>;
    kv-get: func(key: string) -> option<string>;
}

world plugin {
    import filerouter:sandbox/kv@0.1.0;
    export echo;
    export probe;
}
"#;

const PROBE_APP: &str = r#"
import os
import socket
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import kv

COUNT = 0


class Echo(exports.Echo):
    def echo_bool(self, v): return v
    def echo_u8(self, v): return v
    def echo_s8(self, v): return v
    def echo_u16(self, v): return v
    def echo_s16(self, v): return v
    def echo_u32(self, v): return v
    def echo_s32(self, v): return v
    def echo_u64(self, v): return v
    def echo_s64(self, v): return v
    def echo_f32(self, v): return v
    def echo_f64(self, v): return v
    def echo_char(self, v): return v
    def echo_string(self, v): return v
    def echo_bytes(self, v): return v
    def echo_list(self, v): return v
    def echo_points(self, v): return v
    def echo_record(self, v): return v
    def echo_tuple(self, v): return v
    def echo_option(self, v): return v
    def echo_enum(self, v): return v
    def echo_flags(self, v): return v
    def echo_variant(self, v): return v
    def echo_results(self, v): return v

    def divide(self, a, b):
        if b == 0:
            raise Err("division by zero")
        return a // b

    def fail_with(self, c):
        raise Err(c)

    def nothing(self):
        return None

    def describe(self, p, c, tags):
        return f"{p.x},{p.y},{p.label},{c.name},{'/'.join(tags)}"


class Probe(exports.Probe):
    def read_file(self, path):
        try:
            with open(path) as f:
                return f.read()
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")

    def list_dir(self, path):
        try:
            return sorted(os.listdir(path))
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")

    def write_file(self, path, text):
        try:
            with open(path, "w") as f:
                f.write(text)
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")

    def env(self):
        return sorted(os.environ.items())

    def connect(self, host, port):
        try:
            s = socket.create_connection((host, port), timeout=2)
            s.close()
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")

    def now(self):
        return time.time()

    def counter(self):
        global COUNT
        COUNT += 1
        return COUNT

    def spin(self):
        while True:
            pass

    def hog(self, mb):
        blocks = [bytearray(1024 * 1024) for _ in range(mb)]
        return len(blocks)

    def crash(self, message):
        raise RuntimeError(message)

    def kv_incr(self, key):
        return kv.incr(key, 1, None)

    def kv_get(self, key):
        return kv.get(key)
"#;

/// The probe plugin, built once: (its folder with `probe.wasm` and `wit/`).
fn probe() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let plugin = support::lasting_tempdir().join("probe");
            std::fs::create_dir_all(plugin.join("wit/deps/filerouter")).unwrap();
            std::fs::create_dir_all(plugin.join("src")).unwrap();
            std::fs::write(plugin.join("wit/probe.wit"), PROBE_WIT).unwrap();
            std::fs::copy(
                repo().join("wit/filerouter.wit"),
                plugin.join("wit/deps/filerouter/filerouter.wit"),
            )
            .unwrap();
            std::fs::write(plugin.join("src/app.py"), PROBE_APP).unwrap();
            let out = Command::new(componentize_py())
                .args([
                    "-d",
                    "wit",
                    "-w",
                    "plugin",
                    "componentize",
                    "-p",
                    "src",
                    "-o",
                    "probe.wasm",
                    "app",
                ])
                .current_dir(&plugin)
                .output()
                .expect("run componentize-py (cargo build installs it into target/guest-tools/)");
            assert!(
                out.status.success(),
                "componentize-py failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            // Compile it once (it is cached by hash) before tests start servers in parallel.
            let warm = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
            warm.write("config.py", GRANTS_KV);
            copy_dir(&plugin, &warm.path().join("plugins/probe"));
            warm_up(warm.path());
            plugin
        })
        .as_path()
}

/// Start `filerouter dev` in `dir` and stop it once it serves: compiles (and caches) the
/// project's plugins, which can take long on a busy machine, outside any test's time limit.
fn warm_up(dir: &Path) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new("timeout")
        .args([
            "600",
            support::binary().to_str().unwrap(),
            "dev",
            "--port",
            "0",
        ])
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if line.contains("http://") {
            break;
        }
    }
    // SIGTERM reaches filerouter through `timeout`, which passes it on.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// A project with the probe plugin under `plugins/probe/` and `config` as config.py.
fn project_with_probe(config: &str, files: &[(&str, &str)]) -> Project {
    let project = Project::new(files);
    project.write("config.py", config);
    copy_dir(probe(), &project.path().join("plugins/probe"));
    project
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != "src" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

const GRANTS_KV: &str =
    r#"plugins = {"probe": {"component": "plugins/probe/probe.wasm", "kv": True}}"#;

/// Route code that runs `CASES` (name, call, expected) and reports every mismatch.
const TYPES_ROUTE: &str = r#"
import dataclasses
import types

from filerouter.plugins import Err, Ok, PluginError, Variant, probe

@dataclasses.dataclass
class Pt:
    x: int
    y: int
    label: str | None = None

def GET(request):
    e = probe.echo
    cases = [
        ("bool", lambda: e.echo_bool(True), True),
        ("bool false", lambda: probe.echo_bool(False), False),
        ("u8 max", lambda: e.echo_u8(255), 255),
        ("u8 min", lambda: e.echo_u8(0), 0),
        ("s8 min", lambda: e.echo_s8(-128), -128),
        ("u16 max", lambda: e.echo_u16(65535), 65535),
        ("s16 min", lambda: e.echo_s16(-32768), -32768),
        ("u32 max", lambda: e.echo_u32(4294967295), 4294967295),
        ("s32 min", lambda: e.echo_s32(-2147483648), -2147483648),
        ("u64 max", lambda: e.echo_u64(2**64 - 1), 2**64 - 1),
        ("s64 min", lambda: e.echo_s64(-(2**63)), -(2**63)),
        ("f32", lambda: e.echo_f32(1.5), 1.5),
        ("f64", lambda: e.echo_f64(3.141592653589793), 3.141592653589793),
        ("f64 from int", lambda: e.echo_f64(2), 2.0),
        ("char", lambda: e.echo_char("é"), "é"),
        ("string", lambda: e.echo_string("héllo ☃"), "héllo ☃"),
        ("bytes", lambda: e.echo_bytes(b"\x00\xffabc"), b"\x00\xffabc"),
        ("bytearray", lambda: e.echo_bytes(bytearray(b"xy")), b"xy"),
        ("empty bytes", lambda: e.echo_bytes(b""), b""),
        ("list", lambda: e.echo_list(["a", "b"]), ["a", "b"]),
        ("empty list", lambda: e.echo_list([]), []),
        ("list from tuple", lambda: e.echo_list(("a",)), ["a"]),
        ("records in a list", lambda: e.echo_points([{"x": 1, "y": 2, "label": None}]), [{"x": 1, "y": 2, "label": None}]),
        ("record", lambda: e.echo_record({"x": 1, "y": -2, "label": "p"}), {"x": 1, "y": -2, "label": "p"}),
        ("record from dataclass", lambda: e.echo_record(Pt(3, 4)), {"x": 3, "y": 4, "label": None}),
        ("record from object", lambda: e.echo_record(types.SimpleNamespace(x=5, y=6, label="o", extra=1)), {"x": 5, "y": 6, "label": "o"}),
        ("tuple", lambda: e.echo_tuple(("a", 7, True)), ("a", 7, True)),
        ("tuple from list", lambda: e.echo_tuple(["b", 8, False]), ("b", 8, False)),
        ("option some", lambda: e.echo_option(5), 5),
        ("option none", lambda: e.echo_option(None), None),
        ("enum", lambda: e.echo_enum("dark_green"), "dark_green"),
        ("enum kebab", lambda: e.echo_enum("dark-green"), "dark_green"),
        ("flags", lambda: e.echo_flags({"read", "exec_all"}), {"read", "exec_all"}),
        ("flags from list", lambda: e.echo_flags(["write"]), {"write"}),
        ("no flags", lambda: e.echo_flags(set()), set()),
        ("variant payload", lambda: e.echo_variant(Variant("circle", 2.5)), Variant("circle", 2.5)),
        ("variant tuple", lambda: e.echo_variant(Variant("rect", (3, 4))), Variant("rect", (3, 4))),
        ("variant bare", lambda: e.echo_variant(Variant("empty")), Variant("empty")),
        ("variant str", lambda: e.echo_variant("empty"), Variant("empty")),
        ("nested results", lambda: e.echo_results([Ok(1), Err("x")]), [Ok(1), Err("x")]),
        ("result ok", lambda: e.divide(7, 2), 3),
        ("no result", lambda: e.nothing(), None),
        ("keywords", lambda: e.describe(c="red", tags=["a", "b"], p={"x": 1, "y": 2, "label": None}), "1,2,None,RED,a/b"),
    ]
    failures = []
    for name, call, expected in cases:
        try:
            got = call()
        except Exception as exc:
            failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            continue
        if got != expected or type(got) is not type(expected):
            failures.append(f"{name}: got {got!r}, expected {expected!r}")
    errors = {}
    for name, call in [("divide", lambda: e.divide(1, 0)), ("fail_with", lambda: e.fail_with("blue"))]:
        try:
            call()
        except PluginError as exc:
            errors[name] = [exc.value, exc.plugin, exc.function]
    return {"passed": len(cases) - len(failures), "failures": failures, "errors": errors}
"#;

#[test]
fn every_plain_wit_type_maps_both_ways() {
    let project = project_with_probe(GRANTS_KV, &[("routes/types/route.py", TYPES_ROUTE)]);
    let server = Server::dev(&project);
    let body = support::json(server.get("/types"));
    assert_eq!(body["failures"], json!([]), "{body}");
    assert_eq!(body["passed"], 43, "{body}");
    assert_eq!(
        body["errors"],
        json!({"divide": ["division by zero", "probe", "divide"], "fail_with": ["blue", "probe", "fail_with"]})
    );
}

/// Route code that calls `probe` wrongly in every way and reports the exception each raised.
const ERRORS_ROUTE: &str = r#"
from filerouter.plugins import Variant, probe

def GET(request):
    e = probe.echo
    calls = {
        "u8 too big": lambda: e.echo_u8(256),
        "s8 too small": lambda: e.echo_s8(-129),
        "u64 too big": lambda: e.echo_u64(2**64),
        "negative u32": lambda: e.echo_u32(-1),
        "str for int": lambda: e.echo_u8("x"),
        "float for int": lambda: e.echo_u8(1.5),
        "int for str": lambda: e.echo_string(1),
        "two chars": lambda: e.echo_char("ab"),
        "missing field": lambda: e.echo_record({"x": 1}),
        "unknown field": lambda: e.echo_record({"x": 1, "y": 2, "label": None, "z": 3}),
        "bad field type": lambda: e.echo_points([{"x": 1, "y": "2", "label": None}]),
        "unknown enum": lambda: e.echo_enum("purple"),
        "unknown flag": lambda: e.echo_flags({"fly"}),
        "variant without value": lambda: e.echo_variant(Variant("circle")),
        "unknown case": lambda: e.echo_variant(Variant("square", 1)),
        "short tuple": lambda: e.echo_tuple(("a", 1)),
        "dict key not str": lambda: e.echo_record({1: 2}),
        "missing argument": lambda: e.echo_bool(),
        "extra argument": lambda: e.echo_bool(True, False),
        "unknown keyword": lambda: e.echo_bool(w=True),
        "unknown function": lambda: probe.nope,
        "unsupported value": lambda: e.echo_string(object()),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "no error"
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    try:
        from filerouter.plugins import nope  # noqa: F401
        out["unknown plugin"] = "no error"
    except ImportError as exc:
        out["unknown plugin"] = f"ImportError: {exc}"
    return out
"#;

#[test]
fn every_wrong_call_raises_a_clear_error() {
    let project = project_with_probe(GRANTS_KV, &[("routes/errors/route.py", ERRORS_ROUTE)]);
    let server = Server::dev(&project);
    let body = support::json(server.get("/errors"));
    let expect = [
        (
            "u8 too big",
            "OverflowError: probe.echo_u8(): argument `v`: 256 is out of range for u8 (0 to 255)",
        ),
        (
            "s8 too small",
            "OverflowError: probe.echo_s8(): argument `v`: -129 is out of range for s8",
        ),
        (
            "u64 too big",
            "OverflowError: probe.echo_u64(): argument `v`: 18446744073709551616 is out of range for u64",
        ),
        (
            "negative u32",
            "OverflowError: probe.echo_u32(): argument `v`: -1 is out of range for u32",
        ),
        (
            "str for int",
            "TypeError: probe.echo_u8(): argument `v`: expected an int (WIT u8), got str",
        ),
        (
            "float for int",
            "TypeError: probe.echo_u8(): argument `v`: expected an int (WIT u8), got float",
        ),
        (
            "int for str",
            "TypeError: probe.echo_string(): argument `v`: expected a str (WIT string), got int",
        ),
        (
            "two chars",
            "TypeError: probe.echo_char(): argument `v`: expected a str of one character (WIT char), got a str of 2",
        ),
        (
            "missing field",
            "TypeError: probe.echo_record(): argument `v`: missing field \"y\"",
        ),
        (
            "unknown field",
            "TypeError: probe.echo_record(): argument `v`: unknown field \"z\" (the record has: x, y, label)",
        ),
        (
            "bad field type",
            "TypeError: probe.echo_points(): argument `v`[0][\"y\"]: expected an int (WIT s32), got str",
        ),
        (
            "unknown enum",
            "TypeError: probe.echo_enum(): argument `v`: \"purple\" is not one of red, dark_green, blue",
        ),
        (
            "unknown flag",
            "TypeError: probe.echo_flags(): argument `v`: \"fly\" is not a flag (the flags: read, write, exec_all)",
        ),
        (
            "variant without value",
            "TypeError: probe.echo_variant(): argument `v` (case \"circle\"): this case needs a value: Variant(\"circle\", value)",
        ),
        (
            "unknown case",
            "TypeError: probe.echo_variant(): argument `v`: \"square\" is not a case of the variant (its cases: circle, rect, empty)",
        ),
        (
            "short tuple",
            "TypeError: probe.echo_tuple(): argument `v`: expected a tuple of 3 items, got tuple",
        ),
        (
            "dict key not str",
            "TypeError: a record's keys are str, not int (1)",
        ),
        (
            "missing argument",
            "TypeError: probe.echo_bool() missing argument: 'v'",
        ),
        (
            "extra argument",
            "TypeError: probe.echo_bool() takes 1 arguments but 2 were given",
        ),
        (
            "unknown keyword",
            "TypeError: probe.echo_bool() missing argument: 'v'",
        ),
        (
            "unknown function",
            "AttributeError: plugin `probe` has no function `nope`",
        ),
        (
            "unsupported value",
            "TypeError: cannot pass a object to a plugin",
        ),
        (
            "unknown plugin",
            "ImportError: no plugin named `nope`: config.py's plugins declares probe",
        ),
    ];
    for (name, start) in expect {
        let got = body[name].as_str().unwrap_or_default();
        assert!(
            got.starts_with(start),
            "{name}: got {got:?}, expected it to start with {start:?}"
        );
    }
}

/// Escape attempts from inside the plugin: files, environment, sockets, clocks, the routes.
const ESCAPE_ROUTE: &str = r#"
from filerouter import kv
from filerouter.plugins import PluginError, probe

def attempt(call):
    try:
        return ["ok", call()]
    except PluginError as exc:
        return ["refused", exc.value]

def GET(request, port: int):
    p = probe.probe
    kv.set("route-wrote", "from route")
    return {
        "passwd": attempt(lambda: p.read_file("/etc/passwd")),
        "root": attempt(lambda: p.list_dir("/")),
        "routes": attempt(lambda: p.read_file("/routes/escape/route.py")),
        "project": attempt(lambda: p.read_file("/project/config.py")),
        "files": attempt(lambda: p.read_file("/files/hello.txt")),
        "files up": attempt(lambda: p.read_file("/files/../config.py")),
        "files write": attempt(lambda: p.write_file("/files/new.txt", "x")),
        "env": p.env(),
        "socket": attempt(lambda: p.connect("127.0.0.1", port)),
        "dns": attempt(lambda: p.connect("localhost", port)),
        "now": p.now(),
        "kv from plugin": attempt(lambda: p.kv_incr("plugin-count")),
        "kv route value": p.kv_get("route-wrote"),
        "kv seen by route": kv.get("plugin-count"),
    }
"#;

#[test]
fn a_plugin_reaches_only_what_its_entry_grants() {
    let config = r#"plugins = {"probe": {"component": "plugins/probe/probe.wasm", "kv": True, "files": "data"}}"#;
    let project = project_with_probe(
        config,
        &[
            ("routes/escape/route.py", ESCAPE_ROUTE),
            ("data/hello.txt", "hello from data\n"),
        ],
    );
    let server = Server::dev_with_env(&project, &[("PLUGIN_SECRET", "hunter2")]);
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let body = support::json(server.get(&format!("/escape?port={port}")));
    for name in [
        "passwd",
        "routes",
        "project",
        "files up",
        "files write",
        "socket",
        "dns",
    ] {
        assert_eq!(body[name][0], "refused", "{name}: {body}");
    }
    // The root holds only the granted folder.
    assert!(
        body["root"][0] == "refused" || body["root"][1] == json!(["files"]),
        "{body}"
    );
    assert_eq!(body["files"], json!(["ok", "hello from data\n"]));
    assert_eq!(body["env"], json!([]), "the plugin sees no environment");
    assert_eq!(body["now"], json!(0.0), "no clocks without the grant");
    assert_eq!(body["kv from plugin"], json!(["ok", 1]));
    assert_eq!(
        body["kv route value"],
        json!("\"from route\""),
        "the project's own store"
    );
    assert_eq!(body["kv seen by route"], json!(1));
    assert!(!project.path().join("data/new.txt").exists());
    assert!(!server.log().contains("hunter2"));
}

#[test]
fn clocks_are_granted_only_on_request() {
    let config = r#"plugins = {"probe": {"component": "plugins/probe/probe.wasm", "kv": True, "clocks": True}}"#;
    let project = project_with_probe(
        config,
        &[(
            "routes/now/route.py",
            "from filerouter.plugins import probe\n\ndef GET(request):\n    return {'now': probe.now()}\n",
        )],
    );
    let server = Server::dev(&project);
    let now = support::json(server.get("/now"))["now"].as_f64().unwrap();
    assert!(now > 1.7e9, "{now}");
}

const STATE_ROUTE: &str = r#"
from filerouter.plugins import probe

def GET(request):
    first = probe.counter()
    return {"first": first, "second": probe.counter()}
"#;

#[test]
fn a_plugin_keeps_no_state_between_a_thousand_requests() {
    let project = project_with_probe(GRANTS_KV, &[("routes/state/route.py", STATE_ROUTE)]);
    let server = Server::dev(&project);
    let client = support::client();
    for i in 0..1000 {
        let response = client.get(server.url("/state")).send().unwrap();
        assert_eq!(response.status(), 200, "request {i}");
        let body: Value = response.json().unwrap();
        // One instance per request: its global starts over every time, and lives for the
        // whole request.
        assert_eq!(body, json!({"first": 1, "second": 2}), "request {i}");
    }
}

const TRAP_ROUTE: &str = r#"
from filerouter.plugins import PluginTrap, probe

def GET(request, mode: str):
    p = probe.probe
    if mode == "uncaught":
        p.crash("boom")
    if mode == "spin":
        p.spin()
    try:
        p.hog(200) if mode == "hog" else p.crash("caught")
    except PluginTrap as exc:
        # The trapped instance is gone; the next call gets a fresh one.
        return {"trap": str(exc), "after": p.counter()}
"#;

#[test]
fn a_trap_answers_like_an_exception_and_limits_hold() {
    // A CPU limit far below the wall-clock one: a loop in a plugin is stopped by the CPU limit.
    let config =
        format!("{GRANTS_KV}\nsandbox = {{'memory_mb': 96, 'cpu_ms': 500, 'wall_s': 60}}\n");
    let project = project_with_probe(&config, &[("routes/trap/route.py", TRAP_ROUTE)]);
    let server = Server::dev(&project);

    let response = server
        .request("GET", "/trap?mode=uncaught")
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(response.status(), 500);
    let text = response.text().unwrap();
    assert!(text.contains("PluginTrap"), "{text}");
    assert!(text.contains("`probe` function `crash`"), "{text}");
    assert!(text.contains("routes/trap/route.py"), "{text}");

    let body = support::json(server.get("/trap?mode=caught"));
    assert!(
        body["trap"]
            .as_str()
            .unwrap()
            .contains("`probe` function `crash`"),
        "{body}"
    );
    assert_eq!(body["after"], 1);

    // 200 MiB in the plugin, over the request's 96 MiB cap that it shares with the route.
    let body = support::json(server.get("/trap?mode=hog"));
    let trap = body["trap"].as_str().unwrap();
    assert!(
        trap.contains("`probe` function `hog`") && trap.contains("96 MiB"),
        "{body}"
    );

    let response = server
        .request("GET", "/trap?mode=spin")
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(response.status(), 504);
    assert_eq!(
        response.text().unwrap(),
        r#"{"detail":"Handler timed out"}"#
    );
    assert!(
        support::eventually(std::time::Duration::from_secs(10), || server
            .log()
            .contains("of CPU time")),
        "the log should name the CPU limit:\n{}",
        server.log()
    );
    // The server still serves.
    assert_eq!(server.get("/trap?mode=caught").status(), 200);
}

/// `dev` and `build` refuse a plugin that does not load, naming the plugin, file and item.
#[test]
fn loading_errors_name_the_plugin_the_file_and_the_item() {
    let index = ("routes/index.py", "def GET(request):\n    return {}\n");
    type Change = Box<dyn Fn(&Project)>;
    let cases: Vec<(&str, Change, Vec<&str>)> = vec![
        (
            r#"plugins = {"probe": {"component": "plugins/probe/probe.wasm"}}"#,
            Box::new(|_| {}),
            vec![
                "plugin `probe`",
                "plugins/probe/probe.wasm",
                "imports `filerouter:sandbox/kv@0.1.0`",
                "\"kv\": True",
            ],
        ),
        (
            r#"plugins = {"probe": {"component": "plugins/probe/missing.wasm", "kv": True}}"#,
            Box::new(|_| {}),
            vec![
                "plugin `probe`",
                "plugins/probe/missing.wasm",
                "No such file",
            ],
        ),
        (
            GRANTS_KV,
            Box::new(|p| p.write("plugins/probe/probe.wasm", "not wasm")),
            vec![
                "plugin `probe`",
                "plugins/probe/probe.wasm",
                "not a usable WebAssembly component",
            ],
        ),
        (
            GRANTS_KV,
            Box::new(|p| {
                let wit = PROBE_WIT.replace(
                    "nothing: func();",
                    "nothing: func();\n    extra: func(a: u8) -> u8;",
                );
                p.write("plugins/probe/wit/probe.wit", &wit)
            }),
            vec![
                "plugin `probe`",
                "`test:probe/echo@1.0.0` has no function `extra`",
                "probe.wit:",
            ],
        ),
        (
            GRANTS_KV,
            Box::new(|p| {
                let wit = PROBE_WIT.replace(
                    "echo-u8: func(v: u8) -> u8;",
                    "echo-u8: func(v: u16) -> u8;",
                );
                p.write("plugins/probe/wit/probe.wit", &wit)
            }),
            vec![
                "plugin `probe`",
                "function `echo-u8`",
                "parameter `v`: the WIT says u16, the component has u8",
            ],
        ),
        (
            GRANTS_KV,
            Box::new(|p| {
                let wit = PROBE_WIT.replace(
                    "nothing: func();",
                    "nothing: func();\n    resource blob;\n    open: func() -> blob;",
                );
                p.write("plugins/probe/wit/probe.wit", &wit)
            }),
            vec!["plugin `probe`", "function `open`", "resource"],
        ),
        (
            GRANTS_KV,
            Box::new(|p| p.write("plugins/probe/wit/probe.wit", "package broken")),
            vec!["plugin `probe`", "plugins/probe/wit"],
        ),
        (
            r#"plugins = {"probe": {"component": "../outside.wasm"}}"#,
            Box::new(|_| {}),
            vec!["plugin `probe`", "inside the project"],
        ),
        (
            r#"plugins = {"probe": {"wit": "x"}}"#,
            Box::new(|_| {}),
            vec!["config.py:1", "probe", "component"],
        ),
    ];
    for (config, change, expected) in cases {
        let project = project_with_probe(config, &[index]);
        change(&project);
        for command in ["dev", "build"] {
            let (code, stderr) = refused(command, project.path());
            assert_ne!(code, 0, "{command} with {config}: {stderr}");
            for part in &expected {
                assert!(
                    stderr.contains(part),
                    "{command} with {config}: missing {part:?} in:\n{stderr}"
                );
            }
        }
        assert!(
            !project.path().join(".cache").exists(),
            "a failed build writes nothing"
        );
    }
}

/// Run `filerouter dev --port 0` or `filerouter build` in `dir`, which must refuse: a `dev`
/// that starts serving instead is stopped after a while (and the test then fails).
fn refused(command: &str, dir: &Path) -> (i32, String) {
    let binary = support::binary();
    let mut args = vec!["120", binary.to_str().unwrap(), command];
    if command == "dev" {
        args.extend(["--port", "0"]);
    }
    let output = Command::new("timeout")
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("run filerouter under timeout");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const SERVE_ROUTE: &str = r#"
from filerouter.plugins import probe

def GET(request):
    return {"sum": probe.divide(9, 3), "point": probe.echo_record({"x": 1, "y": 2, "label": None})}
"#;

/// Middleware and not-found.py call plugins too.
const ROOT_FILES: [(&str, &str); 2] = [
    (
        "middleware.py",
        r#"
from filerouter.plugins import probe

async def middleware(request, call_next):
    response = await call_next(request)
    response.headers["x-plugin"] = probe.echo_string("from middleware")
    return response
"#,
    ),
    (
        "not-found.py",
        r#"
from filerouter.plugins import probe

def handler(request, context):
    return {"detail": "Not Found", "seen": probe.echo_list([request.path])}
"#,
    ),
];

#[test]
fn build_seals_the_plugins_and_run_reads_no_plugins_folder() {
    let project = project_with_probe(
        GRANTS_KV,
        &[
            ("routes/serve/route.py", SERVE_ROUTE),
            ROOT_FILES[0],
            ROOT_FILES[1],
        ],
    );
    let (code, _, stderr) = run(&["build"], project.path());
    assert_eq!(code, 0, "{stderr}");
    std::fs::remove_dir_all(project.path().join("plugins")).unwrap();
    let server = Server::run(&project, &[]);
    let response = server.get("/serve");
    assert_eq!(response.headers()["x-plugin"], "from middleware");
    let body = support::json(response);
    assert_eq!(
        body,
        json!({"sum": 3, "point": {"x": 1, "y": 2, "label": null}})
    );
    let response = server.get("/nowhere");
    assert_eq!(response.status(), 404);
    assert_eq!(
        support::json(response),
        json!({"detail": "Not Found", "seen": ["/nowhere"]})
    );
    let (_, out, _) = run(&["status"], project.path());
    assert!(out.contains("plugins"), "{out}");
}

#[test]
fn dev_reloads_a_changed_plugin() {
    let project = project_with_probe(GRANTS_KV, &[("routes/serve/route.py", SERVE_ROUTE)]);
    let server = Server::dev(&project);
    assert_eq!(server.get("/serve").status(), 200);
    let good = std::fs::read(project.path().join("plugins/probe/probe.wasm")).unwrap();
    project.write("plugins/probe/probe.wasm", "broken");
    assert!(
        eventually(Duration::from_secs(20), || {
            let response = server
                .request("GET", "/serve")
                .header("accept", "application/json")
                .send()
                .unwrap();
            response.status() == 500 && response.text().unwrap().contains("plugin `probe`")
        }),
        "{}",
        server.log()
    );
    std::fs::write(project.path().join("plugins/probe/probe.wasm"), good).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || server.get("/serve").status()
            == 200),
        "{}",
        server.log()
    );
    // A plugin removed from config.py is gone at once.
    project.write("config.py", "plugins = {}\n");
    assert!(eventually(Duration::from_secs(20), || server
        .get("/serve")
        .status()
        == 500));
}

#[test]
fn stubs_describe_every_function_for_editors() {
    let project = project_with_probe(
        GRANTS_KV,
        &[("routes/index.py", "def GET(request):\n    return {}\n")],
    );
    // An earlier version's stub of `filerouter` itself, which would hide the typed package.
    project.write(
        "typings/filerouter/__init__.pyi",
        "# Written by `filerouter plugins stubs`.\nfrom typing import Any\n",
    );
    let (code, out, stderr) = run(&["plugins", "stubs"], project.path());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        out.contains("typings/filerouter/plugins/probe.pyi"),
        "{out}"
    );
    assert!(
        !project
            .path()
            .join("typings/filerouter/__init__.pyi")
            .exists(),
        "the old stub of `filerouter` is still there"
    );
    let stub = std::fs::read_to_string(project.path().join("typings/filerouter/plugins/probe.pyi"))
        .unwrap();
    for line in [
        "class Point(TypedDict):",
        "    label: str | None",
        "Color = Literal[\"red\", \"dark_green\", \"blue\"]",
        "Perms = set[Literal[\"read\", \"write\", \"exec_all\"]]",
        "def echo_u8(v: int) -> int:",
        "def echo_bytes(v: bytes) -> bytes:",
        "def echo_tuple(v: tuple[str, int, bool]) -> tuple[str, int, bool]:",
        "def echo_variant(v: Variant) -> Variant:",
        "def divide(a: int, b: int) -> int:",
        "`a / b`, or an error when `b` is 0.",
        "echo: _Echo",
    ] {
        assert!(stub.contains(line), "missing {line:?} in:\n{stub}");
    }
    // Every stub is valid Python.
    for file in ["probe.pyi", "__init__.pyi"] {
        let path = project.path().join("typings/filerouter/plugins").join(file);
        let status = Command::new("python3")
            .args(["-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success(), "{file} does not parse");
    }
}

/// What `examples/plugins-demo/plugins/build.sh` needs for its C plugin and this machine
/// lacks, named; `None` when it has everything.
fn c_plugin_toolchain_missing() -> Option<String> {
    let on_path = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    let mut lacking: Vec<&str> = ["clang", "wasm-ld", "wit-bindgen", "wasm-tools"]
        .into_iter()
        .filter(|tool| !on_path(tool))
        .collect();
    if !Path::new("/usr/include/wasm32-wasi").is_dir() {
        lacking.push("wasi-libc (/usr/include/wasm32-wasi)");
    }
    (!lacking.is_empty()).then(|| lacking.join(", "))
}

/// The example project, its plugins built from source by the documented command. Outside CI a
/// machine without the C toolchain skips it with one line naming what to install.
#[test]
fn the_example_project_serves_both_plugins_from_dev_and_from_a_build() {
    const TEST: &str = "the_example_project_serves_both_plugins_from_dev_and_from_a_build";
    if let Some(lacking) = c_plugin_toolchain_missing() {
        return support::tools::missing(
            TEST,
            &format!("building the example's C plugin needs {lacking}"),
            "Debian's clang, lld, wasi-libc and libclang-rt-14-dev-wasm32, and `cargo install --locked wit-bindgen-cli@0.63.0 wasm-tools@1.263.0`",
        );
    }
    let example = repo().join("examples/plugins-demo");
    let status = Command::new("bash")
        .arg(example.join("plugins/build.sh"))
        .status()
        .expect("run build.sh");
    assert!(
        status.success(),
        "examples/plugins-demo/plugins/build.sh failed"
    );
    let project = Project::copy_of(&example);
    warm_up(project.path());
    let check = |server: &Server| {
        let slug = support::json(server.get("/slug?title=Hello,%20C%20World!"));
        assert_eq!(
            slug,
            json!({"slug": "hello-c-world", "words": 3, "lines": 1, "bytes": 15})
        );
        let page = server.get("/posts/hello");
        assert_eq!(page.status(), 200);
        let html = page.text().unwrap();
        assert!(
            html.contains("<h1>Hello, plugins</h1>") && html.contains("<em>Python</em>"),
            "{html}"
        );
        let index = support::json(server.get("/"));
        assert_eq!(index[1]["slug"], "c-inside");
        assert_eq!(index[0]["outline"][1], json!({"level": 2, "text": "Why"}));
    };
    check(&Server::dev(&project));
    let (code, _, stderr) = run(&["build"], project.path());
    assert_eq!(code, 0, "{stderr}");
    check(&Server::run(&project, &[]));
}
