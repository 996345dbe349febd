//! Isolation, proven rather than assumed: nothing a request does is visible to any later
//! request, on any memory slot, whichever way the host makes a used slot fresh again (only
//! the pages a request wrote, found with the kernel's `PAGEMAP_SCAN` and copied back from the
//! project's memory image; or, without it, the image mapped afresh). Between tenants:
//! `tests/tenant_isolation.rs`.
//!
//! Every request of the probe route first looks for what earlier requests could have left (a
//! module global, a large `bytearray` filled with a pattern, a mutated standard-library object,
//! a cached import, `sys.modules` entries, attributes on snapshot functions spread over the
//! heap), then leaves all of them itself. The project is served by `filerouter run` from a
//! build cache (the route module is in the snapshot) with 4 instance slots, so a slot serves
//! many requests in turn.

use crate::support;

use std::{collections::BTreeSet, sync::Mutex, thread};

use serde_json::Value;
use support::{Project, Server, client, json};

/// Requests one after the other, then at once from [`THREADS`] clients; times
/// `FILEROUTER_HUNT_SCALE` (`bench/hunt.sh` hunts longer).
fn sequential() -> usize {
    support::hunt(500)
}
fn concurrent() -> usize {
    support::hunt(496)
}
const THREADS: usize = 8;

const PROBE: &str = r#"
"""Report what earlier requests left behind, then leave markers of this request's own."""

import builtins
import decimal
import gc
import json
import os
import sys
import types

MARKS = []          # a module global
BIG = None          # a large bytearray, kept in a module global
PATTERN = b"\xa5\x5a\xc3\x3c"


def _spread_functions():
    """Functions of the snapshot at least 64 KiB apart in memory: an attribute set on each
    dirties one page in each of that many disjoint regions of the heap."""
    found = {}
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            if isinstance(value, types.FunctionType):
                found[id(value)] = value
    chosen, last = [], -(1 << 30)
    for address in sorted(found):
        if address - last >= 64 * 1024:
            chosen.append(found[address])
            last = address
    return chosen


def GET(request, token: str, big: int = 0):
    global BIG
    tracked = len(gc.get_objects())
    modules = len(sys.modules)
    seen = []
    if MARKS:
        seen.append(f"module global {MARKS}")
    if BIG is not None:
        seen.append(f"bytearray of {len(BIG)} bytes")
    for name in ("_probe_mark", "_probe_big"):
        if hasattr(json, name):
            seen.append(f"json.{name}")
        if hasattr(builtins, name):
            seen.append(f"builtins.{name}")
    if os.environ:
        seen.append(f"os.environ {dict(os.environ)}")
    if decimal.getcontext().prec != 28:
        seen.append(f"decimal precision {decimal.getcontext().prec}")
    leftover = sorted(name for name in sys.modules if name.startswith(("_probe", "_lib")))
    if leftover:
        seen.append(f"sys.modules {leftover}")
    spread = _spread_functions()
    marked = [fn.__qualname__ for fn in spread if getattr(fn, "_probe_mark", None) is not None]
    if marked:
        seen.append(f"{len(marked)} marked functions, e.g. {marked[:3]}")

    # Now leave every kind of marker.
    MARKS.append(token)
    size = (48 << 20) if big else (1 << 20)
    BIG = bytearray(PATTERN) * (size // len(PATTERN))
    json._probe_mark = token
    json._probe_big = BIG
    builtins._probe_mark = token
    os.environ["PROBE"] = token
    decimal.getcontext().prec = 7
    sys.modules["_probe_" + token] = types.ModuleType("_probe_" + token)
    from _lib import leftover as helper  # a cached import: runs the helper once per instance

    helper.COUNT += 1
    for fn in spread:
        fn._probe_mark = token
    return {
        "token": token,
        "seen": seen,
        "tracked": tracked,
        "modules": modules,
        "spread": len(spread),
        "helper_count": helper.COUNT,
    }
"#;

fn project() -> Project {
    Project::built(&[
        ("routes/probe/route.py", PROBE),
        ("routes/_lib/__init__.py", ""),
        ("routes/_lib/leftover.py", "COUNT = 0\n"),
        ("config.py", "server = {\"workers\": 4}\n"),
    ])
}

/// One probe request; panics on anything but a clean answer.
fn probe(client: &reqwest::blocking::Client, server: &Server, token: usize, big: bool) -> Value {
    let url = server.url(&format!("/probe?token={token:08}&big={}", u8::from(big)));
    let response = client.get(&url).send().expect("GET /probe");
    assert_eq!(response.status(), 200, "request {token}");
    json(response)
}

/// What every answer must say: nothing seen, the helper imported afresh, the same interpreter
/// state at the start of the handler as every other request.
struct Expect {
    baseline: Mutex<Option<(u64, u64, u64)>>,
}

impl Expect {
    fn check(&self, answer: &Value, token: usize) {
        assert_eq!(answer["token"], format!("{token:08}"));
        assert_eq!(
            answer["seen"],
            Value::Array(vec![]),
            "request {token} saw what an earlier request left"
        );
        assert_eq!(
            answer["helper_count"], 1,
            "request {token}: the import was cached"
        );
        let spread = answer["spread"].as_u64().unwrap();
        assert!(spread > 64, "only {spread} disjoint regions dirtied");
        let state = (
            answer["tracked"].as_u64().unwrap(),
            answer["modules"].as_u64().unwrap(),
            spread,
        );
        let mut baseline = self.baseline.lock().unwrap();
        let first = *baseline.get_or_insert(state);
        assert_eq!(
            state, first,
            "request {token} started from a different interpreter state \
             (objects the collector tracks, modules, spread functions)"
        );
    }
}

fn hunt_leftovers(mode: &str) -> (Project, Server) {
    let project = project();
    let server = Server::run(
        &project,
        &[("FILEROUTER_PAGEMAP_SCAN", mode), ("RUST_LOG", "info")],
    );
    let expect = Expect {
        baseline: Mutex::new(None),
    };
    let http = client();
    // Sequential: every request follows the one before it, mostly on the same slot.
    for token in 0..sequential() {
        let answer = probe(&http, &server, token, token % 50 == 49);
        expect.check(&answer, token);
    }
    // Concurrent: more clients than slots, so requests land on every slot in turn.
    let tokens: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());
    thread::scope(|scope| {
        for t in 0..THREADS {
            let (server, expect, tokens) = (&server, &expect, &tokens);
            scope.spawn(move || {
                let http = client();
                for i in 0..concurrent() / THREADS {
                    let token = sequential() + t * (concurrent() / THREADS) + i;
                    let answer = probe(&http, server, token, i % 40 == 39);
                    expect.check(&answer, token);
                    tokens.lock().unwrap().insert(token);
                }
            });
        }
    });
    assert_eq!(tokens.lock().unwrap().len(), concurrent());
    (project, server)
}

#[test]
fn no_request_sees_another_with_pagemap_scan() {
    let (_project, server) = hunt_leftovers("auto");
    let log = server.log();
    if filerouter::sandbox::reset::pagemap_scan_available() {
        assert!(
            log.contains("memory reset: written pages only"),
            "pagemap_scan is available but not in use:\n{log}"
        );
    } else {
        eprintln!("this kernel has no PAGEMAP_SCAN (Linux 6.7+): the copying reset was tested");
    }
}

#[test]
fn no_request_sees_another_without_pagemap_scan() {
    let (_project, server) = hunt_leftovers("off");
    let log = server.log();
    assert!(
        log.contains("memory reset: the image mapped afresh"),
        "FILEROUTER_PAGEMAP_SCAN=off was not in effect:\n{log}"
    );
}

#[test]
fn a_bad_pagemap_setting_stops_the_server_with_its_name() {
    let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
    let path = project.path().to_str().unwrap();
    let (code, out, err) = support::run_with_env(
        &["dev", "--project", path, "--port", "0"],
        project.path(),
        &[("FILEROUTER_PAGEMAP_SCAN", "sometimes")],
    );
    assert_ne!(code, 0, "started anyway:\n{out}\n{err}");
    assert!(
        err.contains("FILEROUTER_PAGEMAP_SCAN=\"sometimes\"") && err.contains("auto, on or off"),
        "{err}"
    );
}

/// Wasm state outside the heap's objects: the allocator's position and the memory's size (a
/// request that grows memory by 128 MiB), and the stack pointer and call stack (a request that
/// traps deep in a recursion, "call stack exhausted": freeing a list nested 400,000 deep, which
/// CPython does by a recursion that checks no depth, unlike `repr`'s, which raises
/// `RecursionError` first). Python cannot read a wasm global, but
/// where the next allocations land shows both: a request after either answers with exactly
/// the addresses a request of a fresh server answers with. (No module of the statically linked
/// guest writes a function table, which `sandbox::guest`'s tests check, so there is no table
/// entry for a request to leave.)
const STATE: &str = r#"
def GET(request, mode: str = "look"):
    if mode == "grow":
        blocks = [bytearray(16 << 20) for _ in range(8)]
        return {"grown": sum(len(b) for b in blocks)}
    if mode == "trap":
        value = []
        for _ in range(400_000):
            value = [value]
        del value  # freed by a C recursion 400,000 deep, past the stack
    return {"small": id(object()), "big": id(bytearray(1 << 20)), "list": id([0] * 1000)}
"#;

#[test]
fn no_request_sees_the_memory_size_or_stack_an_earlier_one_left() {
    let project = Project::built(&[
        ("routes/state/route.py", STATE),
        (
            "config.py",
            "server = {\"workers\": 2}\nsandbox = {\"memory_mb\": 256}\n",
        ),
    ]);
    let server = Server::run(&project, &[]);
    let look = || {
        let response = server.get("/state");
        assert_eq!(response.status(), 200);
        json(response)
    };
    let fresh = look();
    assert!(fresh["big"].as_u64().unwrap() > 0, "{fresh}");
    for round in 0..3 {
        let grown = server.get("/state?mode=grow");
        assert_eq!(grown.status(), 200, "round {round}: growing memory failed");
        assert_eq!(look(), fresh, "round {round}: after memory grew by 128 MiB");
        let trapped = server.get("/state?mode=trap");
        assert_eq!(
            trapped.status(),
            500,
            "round {round}: the deep recursion did not trap"
        );
        assert_eq!(
            look(),
            fresh,
            "round {round}: after a trap deep in the stack"
        );
    }
    assert!(
        server.log_shows("call stack exhausted"),
        "the trap was not the stack's:\n{}",
        server.log()
    );
}

/// The build makes the snapshot's objects immortal (`guest-python/sandbox/immortal.py`), so requests
/// that read them stop writing their reference counts. Route code cannot tell, except where a
/// finalizer is concerned: objects with one stay mortal, and it runs when a request drops the
/// last reference, as it would without a snapshot. What a request replaces is back for the next.
const IMMORTAL: &str = r#"
import gc
import sys

DROPPED = []


class Finalized:
    def __del__(self):
        DROPPED.append("finalized")


def helper():
    return 1


def numbers():
    yield 1


class Prickly(type):
    """A metaclass whose attribute lookups all raise: the build must not trip over it."""

    def __getattribute__(cls, name):
        raise RuntimeError(f"no {name} here")


class Guarded(metaclass=Prickly):
    pass


HELD = Finalized()
TABLE = {"a": [1, 2, 3]}
GEN = numbers()
GUARDED = Guarded()


def GET(request, drop: int = 0):
    global HELD, TABLE
    report = {
        "function": sys._is_immortal(helper),
        "table": sys._is_immortal(TABLE),
        "list": sys._is_immortal(TABLE["a"]),
        "module": sys._is_immortal(globals()),
        "finalized": sys._is_immortal(HELD),
        "guarded": sys._is_immortal(GUARDED),
        "generator": sys._is_immortal(GEN),
        "frozen": gc.get_freeze_count() > 0,
        "table_now": TABLE,
        "dropped": list(DROPPED),
    }
    if drop:
        HELD = None
        TABLE = {"b": [4]}
        TABLE["b"].append(5)
        report["dropped_now"] = list(DROPPED)
    return report
"#;

#[test]
fn snapshot_objects_are_immortal_and_finalizers_still_run() {
    let project = Project::built(&[("routes/immortal/route.py", IMMORTAL)]);
    let server = Server::run(&project, &[]);
    for round in 0..3 {
        let before = json(server.get("/immortal"));
        for name in ["function", "table", "list", "module", "frozen", "guarded"] {
            assert_eq!(before[name], true, "round {round}: {name}: {before}");
        }
        for name in ["finalized", "generator"] {
            assert_eq!(before[name], false, "round {round}: {name}: {before}");
        }
        assert_eq!(before["table_now"], serde_json::json!({"a": [1, 2, 3]}));
        assert_eq!(before["dropped"], serde_json::json!([]), "round {round}");
        let dropping = json(server.get("/immortal?drop=1"));
        assert_eq!(
            dropping["dropped_now"],
            serde_json::json!(["finalized"]),
            "round {round}: the finalizer did not run when the request dropped the object"
        );
    }
}

/// The build fills the snapshot heap's free chunks (`guest-python/sandbox/heap.py`), so that a
/// request's objects come from fresh memory, one after another, instead of from thousands of
/// holes spread over the heap: each page a request writes is copied back after it. Without the
/// fill, these 2,000 objects landed in 284 pages, no two adjacent; with it, in 10.
const HEAP: &str = r#"
def GET(request):
    blocks = [None] * 2000
    for i in range(2000):
        blocks[i] = object()
    addresses = [id(b) for b in blocks]
    steps = [b - a for a, b in zip(addresses, addresses[1:])]
    return {
        "adjacent": sum(1 for s in steps if 0 < s <= 16),
        "pages": len({a // 4096 for a in addresses}),
    }
"#;

#[test]
fn a_requests_new_objects_land_side_by_side_not_in_the_snapshots_holes() {
    let project = Project::built(&[("routes/heap/route.py", HEAP)]);
    let server = Server::run(&project, &[]);
    for round in 0..3 {
        let placed = json(server.get("/heap"));
        let adjacent = placed["adjacent"].as_u64().unwrap_or(0);
        let pages = placed["pages"].as_u64().unwrap_or(u64::MAX);
        assert!(
            adjacent >= 1_900 && pages <= 20,
            "round {round}: 2,000 new objects were spread over the heap: {placed}"
        );
    }
}
