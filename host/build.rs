//! Embeds the guest component and the guest's compiled standard library, which the
//! `filerouter-guest` crate's build script (`guest-python/build/`) made with componentize-py, so
//! that `cargo build` alone produces a binary whose embedded guest matches its sources. Not
//! for: building the guest (that crate's job: its `lib.rs` says why it is a crate of its own).
//!
//! componentize-py's component is dynamically linked (fourteen core modules wired together at
//! every instantiation); [`filerouter_guest_link::link`] (the `linker/` crate) links it
//! statically into one code module beside a data module, with the same WIT world, or fails the
//! build naming the convention it did not find. The result is zstd-compressed into
//! `OUT_DIR/guest.wasm.zst`, and its SHA-256 is exported as `FILEROUTER_GUEST_SHA256`. Linked
//! components are kept in `target/guest-tools/built/` keyed by the guest's inputs and the
//! linker's version, so switching profiles does not link them again.
//!
//! The standard library's code objects (`host/stdlib.py`) go zstd-compressed into
//! `OUT_DIR/stdlib.bin.zst`, compressed once per build of them (also kept in `built/`).
//!
//! The versions the host reports and pins (`FILEROUTER_PYDANTIC_VERSION`, ...) come from the
//! guest's build too, as `DEP_FILEROUTER_GUEST_*` variables (its `links` metadata).

use std::{
    env, fs,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

/// A value of the `filerouter-guest` package's `links` metadata.
fn from_guest(key: &str) -> String {
    let name = format!("DEP_FILEROUTER_GUEST_{key}");
    env::var(&name).unwrap_or_else(|_| {
        panic!("{name} is not set: the filerouter-guest build script did not run before this one")
    })
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    // This script runs again when the guest's does (a dependency's build script output
    // changed); on its own, only when it or the linking option changes.
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("build.rs").display()
    );

    for (env_name, key) in [
        ("FILEROUTER_PYDANTIC_VERSION", "PYDANTIC"),
        ("FILEROUTER_PYDANTIC_CORE_VERSION", "PYDANTIC_CORE"),
        // `name==version` of every bundled distribution, space-separated: what `packages
        // install` pins the project's resolution to and does not install
        // (`host/src/packages/guest.rs`).
        ("FILEROUTER_GUEST_PACKAGES", "PACKAGES"),
        ("FILEROUTER_COMPONENTIZE_PY_VERSION", "COMPONENTIZE_PY"),
    ] {
        println!("cargo:rustc-env={env_name}={}", from_guest(key));
    }

    // `FILEROUTER_LINK_DIRECT_CALLS=off` builds a guest whose trampolines stay indirect: only
    // to measure what direct calls save (README, Performance); never for a release.
    println!("cargo:rerun-if-env-changed=FILEROUTER_LINK_DIRECT_CALLS");
    let options = filerouter_guest_link::Options {
        direct_calls: !matches!(
            env::var("FILEROUTER_LINK_DIRECT_CALLS").as_deref(),
            Ok("off" | "0" | "no" | "false")
        ),
    };
    let component = PathBuf::from(from_guest("COMPONENT"));
    let key = from_guest("KEY");
    let stdlib_raw = PathBuf::from(from_guest("STDLIB"));
    // The two take seconds each on a fresh build (the linker crate is compiled for build
    // scripts without optimization; zstd is optimized, see the workspace's Cargo.toml), and the
    // library's compile waits for them: side by side.
    std::thread::scope(|scope| {
        let stdlib = scope.spawn(|| stdlib(&stdlib_raw, &out));
        guest(&component, &key, &options, &out);
        if let Err(panic) = stdlib.join() {
            std::panic::resume_unwind(panic);
        }
    });
}

/// `OUT_DIR/guest.wasm.zst`: the guest component `component` linked statically (kept beside it,
/// named by the guest's `key` and the linker's version), compressed; its SHA-256 goes to
/// `FILEROUTER_GUEST_SHA256`.
fn guest(component: &Path, key: &str, options: &filerouter_guest_link::Options, out: &Path) {
    let linked = component.with_file_name(format!(
        "guest-{key}-linked-{}{}.wasm",
        filerouter_guest_link::VERSION,
        if options.direct_calls {
            ""
        } else {
            "-indirect"
        }
    ));
    if !linked.exists() {
        let dynamic = fs::read(component).expect("read built guest");
        let wasm = filerouter_guest_link::link_with(&dynamic, options)
            .unwrap_or_else(|e| panic!("link the guest statically: {e}"));
        // Per process: two builds of different profiles may link at once.
        let tmp = linked.with_extension(format!("wasm.{}.tmp", std::process::id()));
        fs::write(&tmp, wasm).expect("write the linked guest");
        fs::rename(&tmp, &linked).expect("store the linked guest");
    }

    let wasm = fs::read(&linked).expect("read the linked guest");
    let sha = hex::encode(Sha256::digest(&wasm));
    let compressed = zstd::encode_all(&wasm[..], 9).expect("compress guest");
    fs::write(out.join("guest.wasm.zst"), compressed).expect("write guest.wasm.zst");
    println!("cargo:rustc-env=FILEROUTER_GUEST_SHA256={sha}");
}

/// `OUT_DIR/stdlib.bin.zst` (the host hands modules to the guest from it: see
/// `host/src/sandbox/stdlib.rs`), from the guest build's `stdlib.bin`. Compressing at level 19
/// takes a while, so the result is kept beside it, named after it: a new `stdlib.bin` has a new
/// name.
fn stdlib(raw: &Path, out: &Path) {
    let mut name = raw.file_name().expect("a file name").to_os_string();
    name.push(".zst");
    let compressed = raw.with_file_name(name);
    if !compressed.exists() {
        let bytes = fs::read(raw).expect("read the compiled standard library");
        let zst = zstd::encode_all(&bytes[..], 19).expect("compress the standard library");
        let tmp = compressed.with_extension(format!("zst.{}.tmp", std::process::id()));
        fs::write(&tmp, zst).expect("store the compressed standard library");
        fs::rename(&tmp, &compressed).expect("store the compressed standard library");
    }
    fs::copy(&compressed, out.join("stdlib.bin.zst")).expect("copy stdlib.bin.zst");
}
