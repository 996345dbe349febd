//! Builds the guest component from `guest-python/` and `wit/` with the pinned componentize-py,
//! so that `cargo build` alone produces a binary whose embedded guest matches its sources.
//! What it makes, the host's build script (`host/build.rs`) links statically, compresses and
//! embeds; it hands it over as this package's `links` metadata (below).
//!
//! Its tools, downloads and results live in `target/guest-tools/` (`FILEROUTER_GUEST_TOOLS`, an
//! absolute path, names another folder: `.ci/run` builds this crate alone in a target folder of
//! its own at the start of CI, for the release build to find its results there). One build at a
//! time uses that folder: a second one, of another profile or started by CI, waits for the
//! first and then takes what it built from the cache.
//!
//! componentize-py is looked up in this order:
//! 1. `FILEROUTER_COMPONENTIZE_PY`, a path to the `componentize-py` executable;
//! 2. a private virtual environment under `target/guest-tools/`, created on first use with
//!    `python3 -m venv` and `pip install componentize-py==VERSION` (needs Python 3 and PyPI).
//!
//! Built components are kept in `target/guest-tools/built/` keyed by the hash of every input, so
//! switching profiles does not rebuild them.
//!
//! The guest also carries pydantic 2 (`host/guest-packages.txt`, [`bundled`]): PyPI's wheels,
//! and pydantic-core compiled for the sandbox from its sdist with Debian's WASI Rust toolchain
//! ([`toolchain`], installed with apt-get when missing and the build may), in a folder that
//! componentize-py gets as a second `-p` path. The guest's cache key includes that folder's key.
//!
//! The same componentize-py also compiles its standard library to code objects
//! (`host/stdlib.py`, see [`stdlib`]), once per componentize-py version and script.
//!
//! The metadata, as `DEP_FILEROUTER_GUEST_<KEY>` in the host's build script:
//! - `COMPONENT`: the built (dynamically linked) guest component;
//! - `KEY`: a short hash of everything it was built from, to name what is made from it;
//! - `STDLIB`: the compiled standard library (`stdlib.bin`, uncompressed), named by its key;
//! - `COMPONENTIZE_PY`, `PYDANTIC`, `PYDANTIC_CORE`: versions; `PACKAGES`: every bundled
//!   distribution as `name==version`, space-separated.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use sha2::{Digest, Sha256};

mod bundled;
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
    // This crate is guest-python/build/.
    let guest = manifest.parent().expect("guest-python").to_path_buf();
    let root = guest.parent().expect("workspace root").to_path_buf();
    let host = root.join("host");
    let wit = root.join("wit");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out.
    let target = out
        .ancestors()
        .nth(4)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out.clone());
    println!("cargo:rerun-if-env-changed=FILEROUTER_GUEST_TOOLS");
    let tools = env::var_os("FILEROUTER_GUEST_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("guest-tools"));
    let _lock = lock(&tools);

    println!("cargo:rerun-if-changed={}", wit.display());
    println!("cargo:rerun-if-changed={}", guest.display());
    println!("cargo:rerun-if-env-changed=FILEROUTER_COMPONENTIZE_PY");

    let site = bundled::site(
        &host.join("guest-packages.txt"),
        &tools,
        &venv(&tools),
        &GUEST_PYTHON,
    );
    println!("cargo:pydantic={}", site.pydantic);
    println!("cargo:pydantic_core={}", site.pydantic_core);
    println!(
        "cargo:packages={}",
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
        // Per process, as the stage: two builds of different profiles may run this at once.
        let tmp = built.with_extension(format!("wasm.{}.tmp", std::process::id()));
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
    println!("cargo:component={}", built.display());
    println!("cargo:key={}", &input_hash[..16]);
    println!("cargo:componentize_py={COMPONENTIZE_PY_VERSION}");

    let stdlib = stdlib(&host, &tools);
    println!("cargo:stdlib={}", stdlib.display());
}

/// The guest's standard library compiled to code objects (`stdlib.bin`, which the host embeds
/// zstd-compressed: see `host/src/sandbox/stdlib.rs`). `host/stdlib.py` does the compiling
/// inside a throwaway componentize-py build, on the guest's own CPython and its own copy of the
/// standard library. Kept in `target/guest-tools/built/`, keyed by the componentize-py version
/// and the script: editing the guest does not compile it again.
fn stdlib(host: &Path, tools: &Path) -> PathBuf {
    let script_path = host.join("stdlib.py");
    println!("cargo:rerun-if-changed={}", script_path.display());
    let script = fs::read(&script_path).expect("read host/stdlib.py");
    let mut hasher = Sha256::new();
    hasher.update(COMPONENTIZE_PY_VERSION.as_bytes());
    hasher.update(&script);
    let key = hex::encode(hasher.finalize());
    let built = tools
        .join("built")
        .join(format!("stdlib-{}.bin", &key[..16]));
    if built.exists() {
        return built;
    }
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
    // The work folder is beside `built`, so the file moves whole, never seen half-written.
    fs::rename(app.join("stdlib.bin"), &built).expect("store the compiled standard library");
    let _ = fs::remove_dir_all(&work);
    built
}

/// `tools/.lock`, held until dropped: the guest's build runs once at a time per tools folder,
/// and the next one finds the first one's results.
fn lock(tools: &Path) -> fs::File {
    fs::create_dir_all(tools).unwrap_or_else(|e| panic!("create {}: {e}", tools.display()));
    let path = tools.join(".lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    file
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
