//! Builds the guest component from `guest-python/` and `wit/` with the pinned componentize-py,
//! so that `cargo build` alone produces a binary whose embedded guest matches its sources.
//!
//! componentize-py is looked up in this order:
//! 1. `FILEROUTER_COMPONENTIZE_PY`, a path to the `componentize-py` executable;
//! 2. a private virtual environment under `target/guest-tools/`, created on first use with
//!    `python3 -m venv` and `pip install componentize-py==VERSION` (needs Python 3 and PyPI).
//!
//! componentize-py's component is dynamically linked (fourteen core modules wired together at
//! every instantiation); [`filerouter_guest_link::link`] (the `linker/` crate) then links it
//! statically into one code module beside a data module, with the same WIT world, or fails the
//! build naming the convention it did not find. The result is zstd-compressed into
//! `OUT_DIR/guest.wasm.zst`, and its SHA-256 is exported as `FILEROUTER_GUEST_SHA256`. Built
//! components are kept in `target/guest-tools/built/` keyed by the hash of every input (the
//! linked one also by the linker's version), so switching profiles does not rebuild them.
//!
//! The guest also carries pydantic 2 (`host/guest-packages.txt`, [`bundled`]): PyPI's wheels,
//! and pydantic-core compiled for the sandbox from its sdist with Debian's WASI Rust toolchain
//! ([`toolchain`], installed with apt-get when missing and the build may), in a folder that
//! componentize-py gets as a second `-p` path. The guest's cache key includes that folder's key.
//!
//! The same componentize-py also compiles its standard library to code objects
//! (`host/stdlib.py`, see [`stdlib`]) into `OUT_DIR/stdlib.bin.zst`, once per componentize-py
//! version and script.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use sha2::{Digest, Sha256};

#[path = "build/bundled.rs"]
mod bundled;
#[path = "build/toolchain.rs"]
mod toolchain;

/// The componentize-py release the guest is built and tested with. Minor versions break things.
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The WIT world the guest implements, and the Python module that implements it.
const WORLD: &str = "router";
const APP_MODULE: &str = "dispatcher";
/// The CPython componentize-py embeds: native extensions are compiled for it.
const GUEST_PYTHON: bundled::GuestPython = bundled::GuestPython {
    version: "3.14",
    extension_suffix: ".cpython-314-wasm32-wasi.so",
};

/// Where `file` (under `guest`) sits in the guest's import root: a top-level folder of
/// `guest-python/` without an `__init__.py` is a group (`sandbox/`, `stand_ins/`), whose contents
/// are top-level modules; a package (`filerouter/`) stays a package.
fn import_path(guest: &Path, file: &Path) -> PathBuf {
    let rel = file.strip_prefix(guest).expect("under guest-python");
    let mut parts = rel.components();
    match parts.next() {
        Some(first)
            if rel.components().count() > 1
                && !guest.join(first.as_os_str()).join("__init__.py").exists() =>
        {
            parts.as_path().to_path_buf()
        }
        _ => rel.to_path_buf(),
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("workspace root").to_path_buf();
    let wit = root.join("wit");
    let guest = root.join("guest-python");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out.
    let target = out
        .ancestors()
        .nth(4)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out.clone());
    let tools = target.join("guest-tools");

    println!("cargo:rerun-if-changed={}", wit.display());
    println!("cargo:rerun-if-changed={}", guest.display());
    println!("cargo:rerun-if-env-changed=FILEROUTER_COMPONENTIZE_PY");

    let site = bundled::site(
        &manifest.join("guest-packages.txt"),
        &tools,
        &venv(&tools),
        &GUEST_PYTHON,
    );
    println!(
        "cargo:rustc-env=FILEROUTER_PYDANTIC_VERSION={}",
        site.pydantic
    );
    println!(
        "cargo:rustc-env=FILEROUTER_PYDANTIC_CORE_VERSION={}",
        site.pydantic_core
    );
    // `name==version` of every bundled distribution, space-separated: what `packages install`
    // pins the project's resolution to and does not install (`host/src/packages/guest.rs`).
    println!(
        "cargo:rustc-env=FILEROUTER_GUEST_PACKAGES={}",
        site.packages
            .iter()
            .map(|(name, version)| format!("{name}=={version}"))
            .collect::<Vec<_>>()
            .join(" ")
    );

    let mut inputs = Vec::new();
    collect(&wit, &["wit"], &mut inputs);
    collect(&guest, &["py"], &mut inputs);
    inputs.sort();
    let mut hasher = Sha256::new();
    hasher.update(COMPONENTIZE_PY_VERSION.as_bytes());
    hasher.update(site.key.as_bytes());
    for file in &inputs {
        let rel = file.strip_prefix(&root).unwrap_or(file);
        hasher.update(rel.to_string_lossy().as_bytes());
        hasher.update(fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display())));
    }
    let input_hash = hex::encode(hasher.finalize());

    let built_dir = tools.join("built");
    fs::create_dir_all(&built_dir).expect("create target/guest-tools/built");
    let built = built_dir.join(format!("guest-{}.wasm", &input_hash[..16]));
    if !built.exists() {
        // The guest's CPython writes `__pycache__/` into the folders it imports from while it is
        // built (PYTHONDONTWRITEBYTECODE does not reach it): into guest-python/, that would make
        // the next `cargo build` run this script again and recompile the crate. It imports from
        // a copy of the hashed sources instead.
        let stage = tools.join(format!(
            "guest-src-{}-{}",
            &input_hash[..16],
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&stage);
        for file in inputs.iter().filter(|f| f.starts_with(&guest)) {
            let to = stage.join(import_path(&guest, file));
            assert!(
                !to.exists(),
                "guest-python: {} is in two groups (the guest has one import root)",
                import_path(&guest, file).display()
            );
            fs::create_dir_all(to.parent().expect("a parent")).expect("stage guest-python");
            fs::copy(file, &to).expect("stage guest-python");
        }
        let componentize = componentize_py(&tools);
        let tmp = built.with_extension("wasm.tmp");
        let status = Command::new(&componentize)
            .arg("-d")
            .arg(&wit)
            .arg("-w")
            .arg(WORLD)
            .arg("componentize")
            .arg("-p")
            .arg(&stage)
            .arg("-p")
            .arg(&site.dir)
            .arg("-o")
            .arg(&tmp)
            .arg(APP_MODULE)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .status()
            .unwrap_or_else(|e| panic!("run {}: {e}", componentize.display()));
        let _ = fs::remove_dir_all(&stage);
        assert!(
            status.success(),
            "componentize-py failed to build the guest ({status})"
        );
        fs::rename(&tmp, &built).expect("store built guest");
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
    let linked = built_dir.join(format!(
        "guest-{}-linked-{}{}.wasm",
        &input_hash[..16],
        filerouter_guest_link::VERSION,
        if options.direct_calls {
            ""
        } else {
            "-indirect"
        }
    ));
    if !linked.exists() {
        let dynamic = fs::read(&built).expect("read built guest");
        let wasm = filerouter_guest_link::link_with(&dynamic, &options)
            .unwrap_or_else(|e| panic!("link the guest statically: {e}"));
        let tmp = linked.with_extension("wasm.tmp");
        fs::write(&tmp, wasm).expect("write the linked guest");
        fs::rename(&tmp, &linked).expect("store the linked guest");
    }

    let wasm = fs::read(&linked).expect("read the linked guest");
    let sha = hex::encode(Sha256::digest(&wasm));
    let compressed = zstd::encode_all(&wasm[..], 9).expect("compress guest");
    fs::write(out.join("guest.wasm.zst"), compressed).expect("write guest.wasm.zst");
    println!("cargo:rustc-env=FILEROUTER_GUEST_SHA256={sha}");
    println!("cargo:rustc-env=FILEROUTER_COMPONENTIZE_PY_VERSION={COMPONENTIZE_PY_VERSION}");

    stdlib(&manifest, &tools, &out);
}

/// The guest's standard library compiled to code objects, zstd-compressed into
/// `OUT_DIR/stdlib.bin.zst` (the host hands modules to the guest from it: see
/// `host/src/sandbox/stdlib.rs`). `host/stdlib.py` does the compiling inside a throwaway
/// componentize-py build, on the guest's own CPython and its own copy of the standard library.
/// Kept in `target/guest-tools/built/`, keyed by the componentize-py version and the script:
/// editing the guest does not compile it again.
fn stdlib(manifest: &Path, tools: &Path, out: &Path) {
    let script_path = manifest.join("stdlib.py");
    println!("cargo:rerun-if-changed={}", script_path.display());
    let script = fs::read(&script_path).expect("read host/stdlib.py");
    let mut hasher = Sha256::new();
    hasher.update(COMPONENTIZE_PY_VERSION.as_bytes());
    hasher.update(&script);
    let key = hex::encode(hasher.finalize());
    let built = tools
        .join("built")
        .join(format!("stdlib-{}.bin.zst", &key[..16]));
    if !built.exists() {
        // Per process: two builds of different profiles may run this at once.
        let work = tools.join(format!("stdlib-{}-{}", &key[..16], std::process::id()));
        let _ = fs::remove_dir_all(&work);
        let (app, wit) = (work.join("app"), work.join("wit"));
        fs::create_dir_all(&app).expect("create the stdlib build folder");
        fs::create_dir_all(&wit).expect("create the stdlib build folder");
        fs::write(
            wit.join("world.wit"),
            "package filerouter:stdlib-compiler;\n\nworld compiler {}\n",
        )
        .expect("write the compiler's world");
        fs::write(app.join("filerouter_stdlib.py"), &script).expect("write host/stdlib.py");
        let componentize = componentize_py(tools);
        let status = Command::new(&componentize)
            .arg("-d")
            .arg(&wit)
            .arg("-w")
            .arg("compiler")
            .arg("componentize")
            .arg("-p")
            .arg(&app)
            .arg("-o")
            .arg(work.join("unused.wasm"))
            .arg("filerouter_stdlib")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .status()
            .unwrap_or_else(|e| panic!("run {}: {e}", componentize.display()));
        assert!(
            status.success(),
            "componentize-py failed to compile the standard library ({status})"
        );
        let raw = fs::read(app.join("stdlib.bin")).expect("read the compiled standard library");
        let compressed = zstd::encode_all(&raw[..], 19).expect("compress the standard library");
        let tmp = built.with_extension("zst.tmp");
        fs::write(&tmp, compressed).expect("store the compiled standard library");
        fs::rename(&tmp, &built).expect("store the compiled standard library");
        let _ = fs::remove_dir_all(&work);
    }
    fs::copy(&built, out.join("stdlib.bin.zst")).expect("copy stdlib.bin.zst");
}

/// Every file under `dir` whose extension is one of `exts`, skipping `__pycache__`.
fn collect(dir: &Path, exts: &[&str], into: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "__pycache__") {
                collect(&path, exts, into);
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e))
        {
            into.push(path);
        }
    }
}

/// The componentize-py executable to use, installing the pinned version if needed.
fn componentize_py(tools: &Path) -> PathBuf {
    if let Some(path) = env::var_os("FILEROUTER_COMPONENTIZE_PY") {
        return PathBuf::from(path);
    }
    venv(tools).join("bin").join("componentize-py")
}

/// The build's private Python environment (`target/guest-tools/venv-VERSION`), with the pinned
/// componentize-py, made on first use; its pip also downloads the bundled packages.
fn venv(tools: &Path) -> PathBuf {
    let venv = tools.join(format!("venv-{COMPONENTIZE_PY_VERSION}"));
    let exe = venv.join("bin").join("componentize-py");
    if exe.exists() {
        return venv;
    }
    println!(
        "cargo:warning=installing componentize-py {COMPONENTIZE_PY_VERSION} into {} (once)",
        venv.display()
    );
    let python = env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let status = Command::new(&python)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap_or_else(|e| {
            panic!("building the guest needs Python 3 ({python}): {e}; install python3 and python3-venv")
        });
    assert!(
        status.success(),
        "python3 -m venv failed; install python3-venv"
    );
    let status = Command::new(venv.join("bin").join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!("componentize-py=={COMPONENTIZE_PY_VERSION}"))
        .status()
        .expect("run pip");
    assert!(
        status.success(),
        "pip install componentize-py=={COMPONENTIZE_PY_VERSION} failed"
    );
    venv
}
