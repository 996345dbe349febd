//! Isolation between tenants that share memory slots (issue 28): one compiled guest serves
//! every tenant, and a slot last used by one tenant is switched to another's memory image.
//!
//! Three tenants built by the real `filerouter build`, with the same route module (same file,
//! same module globals, different values), take turns in one `filerouter run --tenants` with
//! one worker, so two memory slots serve all three and switch between them all the time. Every
//! request first hunts for what any earlier request, of any tenant, could have left: module
//! globals, a large buffer kept in a global, attributes on the standard library and builtins,
//! `sys.modules` entries, and the allocator's state (the addresses fresh objects get, which a
//! free list left by another request would change); then it leaves all of them itself, and a few
//! megabytes of freed blocks full of its name. Every answer must come from the tenant the host
//! names, see nothing, and start from the same interpreter and allocator state as that tenant's
//! first request. The same with the reset's slow path (`FILEROUTER_PAGEMAP_SCAN=off`).

use crate::support;

use std::{collections::HashMap, path::PathBuf, thread, time::Duration};

use serde_json::Value;
use support::admin::{Site, built, client, metric, public_address};

const PROBE: &str = r#"
import builtins
import gc
import json
import sys
import types

MARKS = []       # a module global, the same name in every tenant
BIG = None       # a large buffer kept in a module global


def GET(request, token: str):
    global BIG
    seen = []
    if MARKS:
        seen.append(f"module global {MARKS[:3]}")
    if BIG is not None:
        seen.append(f"buffer of {len(BIG)} bytes starting {bytes(BIG[:16])!r}")
    for owner in (json, builtins):
        for name in dir(owner):
            if name.startswith("_probe"):
                seen.append(f"{owner.__name__}.{name} = {getattr(owner, name)!r}")
    leftover = sorted(name for name in sys.modules if name.startswith("_probe"))
    if leftover:
        seen.append(f"sys.modules {leftover}")
    # The allocator's state: where 300 fresh objects of a few sizes land.
    fresh = [bytearray(16 + 8 * (i % 40)) for i in range(300)]
    layout = hash(tuple(id(x) for x in fresh))
    del fresh
    tracked = len(gc.get_objects())

    # Now leave every kind of marker.
    MARKS.append(f"NAME:{token}")
    BIG = bytearray(b"NAME-leftover-00") * (4 << 16)      # 4 MiB
    json._probe_mark = f"NAME:{token}"
    builtins._probe_mark = f"NAME:{token}"
    sys.modules["_probe_NAME"] = types.ModuleType("_probe_NAME")
    junk = [f"NAME-freed-{i:06}-" * 16 for i in range(4000)]    # blocks the allocator frees
    del junk
    return {"tenant": "NAME", "token": token, "seen": seen, "layout": layout, "tracked": tracked}
"#;

const TENANTS: [&str; 3] = ["ant", "bee", "cat"];
/// Rounds of five requests in turn (and half as many per tenant at once); times
/// `FILEROUTER_HUNT_SCALE` (`bench/hunt.sh` hunts longer).
fn rounds() -> usize {
    support::hunt(200)
}

/// The three tenants' projects, each built by the real `filerouter build`.
fn projects() -> Vec<(&'static str, PathBuf)> {
    TENANTS
        .iter()
        .map(|name| {
            let source = PROBE.replace("NAME", name);
            let project = built(
                &format!("tenant-isolation-{name}"),
                &[("routes/probe/route.py", &source)],
            );
            (*name, project)
        })
        .collect()
}

fn site() -> Site {
    let mut toml = String::new();
    for name in TENANTS {
        toml.push_str(&format!(
            "[tenant.{name}]\nhosts = [\"{name}.test\"]\nproject = \"{name}\"\n\n"
        ));
    }
    let projects = projects();
    let projects: Vec<(&str, &std::path::Path)> =
        projects.iter().map(|(n, p)| (*n, p.as_path())).collect();
    Site::new(&projects, &toml)
}

/// What each tenant's first request saw of the allocator and the collector.
type Baselines = HashMap<String, (Value, Value)>;

fn probe(
    http: &reqwest::blocking::Client,
    address: &str,
    tenant: &str,
    token: usize,
    baselines: &mut Baselines,
) {
    let response = http
        .get(format!("http://{address}/probe?token={token:08}"))
        .header("host", format!("{tenant}.test"))
        .send()
        .expect("GET /probe");
    assert_eq!(response.status(), 200, "request {token} to {tenant}");
    let answer: Value = response.json().unwrap();
    assert_eq!(
        answer["tenant"], tenant,
        "request {token}: another tenant answered"
    );
    assert_eq!(answer["token"], format!("{token:08}"));
    assert_eq!(
        answer["seen"],
        Value::Array(vec![]),
        "request {token} to {tenant} saw what an earlier request left"
    );
    let state = (answer["layout"].clone(), answer["tracked"].clone());
    let first = baselines.entry(tenant.to_string()).or_insert(state.clone());
    assert_eq!(
        &state, first,
        "request {token} to {tenant} started from another allocator or collector state \
         (layout of fresh objects, objects tracked) than its first request"
    );
}

fn tenants_take_turns_on_two_slots(scan: &str) {
    let site = site();
    let server = site.start_with(
        &["--workers", "1"],
        None,
        &[("FILEROUTER_PAGEMAP_SCAN", scan), ("RUST_LOG", "info")],
    );
    let address = public_address(&server);
    let http = client(Duration::from_secs(30));
    let mut baselines = Baselines::new();
    // In turn: most requests follow another tenant's (their slot is switched to them), some
    // follow their own tenant's (their slot is reset and kept warm).
    let mut token = 0;
    for _ in 0..rounds() {
        for tenant in [TENANTS[0], TENANTS[0], TENANTS[1], TENANTS[1], TENANTS[2]] {
            probe(&http, &address, tenant, token, &mut baselines);
            token += 1;
        }
    }
    // At once: three clients, one per tenant, on the two slots.
    let results: Vec<Baselines> = thread::scope(|scope| {
        let handles: Vec<_> = TENANTS
            .iter()
            .enumerate()
            .map(|(n, tenant)| {
                let (address, mut mine) = (&address, baselines.clone());
                scope.spawn(move || {
                    let http = client(Duration::from_secs(30));
                    for i in 0..rounds() / 2 {
                        probe(&http, address, tenant, 100_000 * (n + 1) + i, &mut mine);
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.len(), TENANTS.len());

    // The slots really were shared: switched from tenant to tenant, and reset the asked way.
    let admin = support::admin::admin_address(&server);
    let text = http
        .get(format!("http://{admin}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let switched = metric(
        &text,
        "filerouter_memory_slots_given_total{slot=\"switched\"}",
    );
    let created = metric(
        &text,
        "filerouter_memory_slots_given_total{slot=\"created\"}",
    );
    assert!(
        switched > rounds() as f64,
        "only {switched} switches:\n{text}"
    );
    assert!(created <= 4.0, "{created} slots made:\n{text}");
    // The tenants' images are layers of one base (built one after another into one cache
    // folder, from the same module), so the switches only copied the pages where they differ.
    let within_base = metric(&text, "filerouter_memory_slot_switches_within_base_total");
    assert!(
        within_base > rounds() as f64 / 2.0,
        "only {within_base} of {switched} switches between layers of one base:\n{text}"
    );
    let copied = metric(
        &text,
        "filerouter_memory_slot_resets_total{reset=\"copied\"}",
    );
    let remapped = metric(
        &text,
        "filerouter_memory_slot_resets_total{reset=\"remapped\"}",
    );
    if scan == "off" {
        assert_eq!(copied, 0.0, "{text}");
    } else if filerouter::sandbox::reset::pagemap_scan_available() {
        assert!(copied > remapped, "{text}");
    }
}

#[test]
fn tenants_sharing_slots_never_see_each_other_with_the_scan() {
    tenants_take_turns_on_two_slots("auto");
}

#[test]
fn tenants_sharing_slots_never_see_each_other_without_the_scan() {
    tenants_take_turns_on_two_slots("off");
}
