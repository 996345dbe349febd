//! The third-party Python packages built into the guest: pydantic 2 and the packages it imports,
//! pinned with their hashes in `host/guest-packages.txt`. Not for: project packages
//! (`filerouter packages install` puts those in the project), nor linking the guest.
//!
//! The pure-Python ones are PyPI's wheels, unpacked as they are. pydantic-core is Rust (PyO3):
//! its PyPI sdist is compiled here for `wasm32-wasip1` into a WebAssembly shared library
//! (`dylink.0`, position-independent), the form componentize-py links a native extension in:
//! a PIC staticlib built with `-Zbuild-std` (so the standard library is PIC too), then
//! `wasm-ld --experimental-pic -shared`, its undefined symbols (CPython's C API, libc) left as
//! imports that componentize-py's linker resolves against the guest's own libpython and libc.
//! The packages go into one folder, which componentize-py gets as one more `-p` path;
//! `guest-python/sandbox/bundled.py` imports them at build time, into the snapshot.
//!
//! Everything is cached in `target/guest-tools/`: the downloads by hash, the compiled
//! pydantic-core by its version, its sdist's hash and the toolchain's versions (a second
//! `cargo build` does not compile it again), the folder by all of those.

use std::{
    collections::HashMap,
    env, fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use sha2::{Digest, Sha256};

use crate::toolchain::{self, Toolchain};

/// Bump when the way pydantic-core is compiled or linked changes: it keys the cached library.
const CORE_RECIPE: &str = "1";
/// Bump when the folder's layout changes.
const SITE_RECIPE: &str = "2";
/// The export by which CPython loads the extension module.
const CORE_INIT: &str = "PyInit__pydantic_core";

/// The guest's CPython, as PyO3 and componentize-py need to know it.
pub struct GuestPython {
    /// `3.14`: PyO3 compiles against this version's C API.
    pub version: &'static str,
    /// `.cpython-314-wasm32-wasi.so`: the file name suffix componentize-py links as an extension.
    pub extension_suffix: &'static str,
}

/// The folder to hand componentize-py, and what identifies it.
pub struct Site {
    pub dir: PathBuf,
    /// Changes whenever any file in the folder can: part of the guest's cache key.
    pub key: String,
    pub pydantic: String,
    pub pydantic_core: String,
    /// Every distribution in the folder, as (name as pinned, version): what `filerouter
    /// packages install` counts as provided by the guest.
    pub packages: Vec<(String, String)>,
}

struct Pin {
    name: String,
    version: String,
    sha256: String,
}

/// Downloads, compiles and assembles what `pins` lists (or takes it from the cache).
/// `venv` is the build's Python environment (its pip and python).
pub fn site(pins: &Path, tools: &Path, venv: &Path, python: &GuestPython) -> Site {
    println!("cargo:rerun-if-changed={}", pins.display());
    let pins_text = fs::read_to_string(pins).expect("read host/guest-packages.txt");
    let list = parse(&pins_text);
    let version_of = |name: &str| {
        list.iter()
            .find(|p| p.name == name)
            .map(|p| p.version.clone())
            .unwrap_or_else(|| panic!("host/guest-packages.txt does not pin {name}"))
    };
    let (pydantic, pydantic_core) = (version_of("pydantic"), version_of("pydantic-core"));

    let files = download(&list, pins, &tools.join("downloads"), venv);
    let core_pin = list.iter().find(|p| p.name == "pydantic-core").unwrap();
    let toolchain = toolchain::find_or_install();
    let (core_lib, core_key) = compile_core(
        core_pin,
        &files[&core_pin.name],
        tools,
        venv,
        &toolchain,
        python,
    );

    let mut hasher = Sha256::new();
    hasher.update(SITE_RECIPE);
    hasher.update(python.extension_suffix);
    for pin in &list {
        hasher.update(&pin.sha256);
    }
    hasher.update(&core_key);
    let key = hex::encode(hasher.finalize());
    let dir = tools.join(format!("site-{}", &key[..16]));
    if !dir.exists() {
        let tmp = tools.join(format!("site-{}-{}", &key[..16], std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).expect("create the bundled packages' folder");
        for pin in &list {
            if pin.name == "pydantic-core" {
                continue;
            }
            run(
                Command::new(venv.join("bin/python"))
                    .args(["-m", "zipfile", "-e"])
                    .arg(&files[&pin.name])
                    .arg(&tmp),
                &format!("unpack the {} wheel", pin.name),
            );
        }
        // pydantic-core's Python part, from the same sdist, beside the compiled library.
        let package = tmp.join("pydantic_core");
        fs::create_dir_all(&package).expect("create pydantic_core/");
        let unpacked = Unpacked::new(&files[&core_pin.name], venv);
        let source = unpacked.root().join("python/pydantic_core");
        for entry in fs::read_dir(&source)
            .unwrap_or_else(|e| panic!("read {}: {e}", source.display()))
            .flatten()
        {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.path().is_file() && (name.ends_with(".py") || name == "py.typed") {
                fs::copy(entry.path(), package.join(&*name)).expect("copy pydantic_core's Python");
            }
        }
        fs::copy(
            &core_lib,
            package.join(format!("_pydantic_core{}", python.extension_suffix)),
        )
        .expect("copy the compiled pydantic-core");
        write_core_metadata(&unpacked.root(), &tmp, &core_pin.version);
        if fs::rename(&tmp, &dir).is_err() && !dir.exists() {
            panic!("store {}", dir.display());
        }
        let _ = fs::remove_dir_all(&tmp);
    }
    Site {
        dir,
        key,
        pydantic,
        pydantic_core,
        packages: list
            .iter()
            .map(|p| (p.name.clone(), p.version.clone()))
            .collect(),
    }
}

/// pydantic-core's `.dist-info`, as a wheel of it would carry one: `METADATA` is the sdist's
/// `PKG-INFO` (the same core metadata), `RECORD` lists the package's files. The wheels' own
/// `.dist-info` folders come with them; with this one every bundled distribution has its
/// metadata, which `guest-python/sandbox/bundled.py` keeps for `importlib.metadata` in the sandbox.
fn write_core_metadata(source: &Path, site: &Path, version: &str) {
    let info = site.join(format!("pydantic_core-{version}.dist-info"));
    fs::create_dir_all(&info).expect("create pydantic_core's .dist-info");
    let pkg_info = fs::read_to_string(source.join("PKG-INFO"))
        .expect("read PKG-INFO of the pydantic-core sdist");
    fs::write(info.join("METADATA"), pkg_info).expect("write pydantic_core's METADATA");
    let mut files: Vec<String> = fs::read_dir(site.join("pydantic_core"))
        .expect("read pydantic_core/")
        .flatten()
        .map(|e| format!("pydantic_core/{},,", e.file_name().to_string_lossy()))
        .collect();
    files.sort();
    files.push(format!("pydantic_core-{version}.dist-info/METADATA,,"));
    files.push(format!("pydantic_core-{version}.dist-info/RECORD,,"));
    files.push(String::new());
    fs::write(info.join("RECORD"), files.join("\n")).expect("write pydantic_core's RECORD");
}

/// The `name==version --hash=sha256:HEX` lines of the pins file.
fn parse(text: &str) -> Vec<Pin> {
    let mut pins = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let spec = words.next().unwrap_or_default();
        let (name, version) = spec
            .split_once("==")
            .unwrap_or_else(|| panic!("host/guest-packages.txt: `{line}` pins no version"));
        let sha256 = words
            .find_map(|w| w.strip_prefix("--hash=sha256:"))
            .unwrap_or_else(|| panic!("host/guest-packages.txt: `{line}` has no --hash=sha256:"));
        pins.push(Pin {
            name: name.to_ascii_lowercase().replace('_', "-"),
            version: version.to_string(),
            sha256: sha256.to_ascii_lowercase(),
        });
    }
    pins
}

/// Each pin's file in `dir`, found by its hash, downloaded with pip (hashes required) if any is
/// missing. Returns the files by package name.
fn download(pins: &[Pin], pins_path: &Path, dir: &Path, venv: &Path) -> HashMap<String, PathBuf> {
    fs::create_dir_all(dir).expect("create target/guest-tools/downloads");
    let find = || {
        let mut by_hash = HashMap::new();
        for entry in fs::read_dir(dir).expect("read downloads").flatten() {
            if let Ok(bytes) = fs::read(entry.path()) {
                by_hash.insert(hex::encode(Sha256::digest(&bytes)), entry.path());
            }
        }
        pins.iter()
            .filter_map(|p| Some((p.name.clone(), by_hash.get(&p.sha256)?.clone())))
            .collect::<HashMap<_, _>>()
    };
    let found = find();
    if found.len() == pins.len() {
        return found;
    }
    // The sdist for pydantic-core (the source is what gets compiled), wheels for the rest.
    // pip prepares the sdist's metadata with maturin, which runs `cargo metadata`.
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args([
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--require-hashes",
        "--only-binary",
        ":all:",
        "--no-binary",
        "pydantic-core",
        "--dest",
    ])
    .arg(dir)
    .arg("-r")
    .arg(pins_path);
    clean_env(&mut pip);
    run(&mut pip, "download host/guest-packages.txt from PyPI");
    let found = find();
    for pin in pins {
        assert!(
            found.contains_key(&pin.name),
            "pip downloaded no file with the SHA-256 host/guest-packages.txt pins for {}=={}",
            pin.name,
            pin.version
        );
    }
    found
}

/// An sdist unpacked into a folder of its own outside the project, removed when dropped. Outside:
/// cargo takes a package under the project's folder (`target/` included) for a member of the
/// project's workspace, and refuses to build it.
struct Unpacked(PathBuf);

impl Unpacked {
    fn new(sdist: &Path, venv: &Path) -> Self {
        let dir = env::temp_dir().join(format!("filerouter-sdist-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let unpacked = Unpacked(dir);
        run(
            Command::new(venv.join("bin/python"))
                .args(["-m", "tarfile", "-e"])
                .arg(sdist)
                .arg(&unpacked.0),
            "unpack the pydantic-core sdist",
        );
        unpacked
    }

    /// The sdist's one top-level folder (`pydantic_core-VERSION`).
    fn root(&self) -> PathBuf {
        let mut entries = fs::read_dir(&self.0)
            .expect("read the unpacked sdist")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir());
        match (entries.next(), entries.next()) {
            (Some(root), None) => root,
            _ => panic!("the pydantic-core sdist does not hold one top-level folder"),
        }
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The compiled pydantic-core (a `dylink.0` shared library) and its cache key.
fn compile_core(
    pin: &Pin,
    sdist: &Path,
    tools: &Path,
    venv: &Path,
    toolchain: &Toolchain,
    python: &GuestPython,
) -> (PathBuf, String) {
    let mut hasher = Sha256::new();
    hasher.update(CORE_RECIPE);
    hasher.update(&pin.sha256);
    hasher.update(python.version);
    hasher.update(&toolchain.identity);
    let key = hex::encode(hasher.finalize());
    let built =
        tools
            .join("built")
            .join(format!("pydantic-core-{}-{}.so", pin.version, &key[..16]));
    if built.exists() {
        return (built, key);
    }
    let unpacked = Unpacked::new(sdist, venv);
    let source = unpacked.root();
    check_rust_version(&source, toolchain);
    println!(
        "cargo:warning=compiling pydantic-core {} for the sandbox with {} (once per version and toolchain: minutes)",
        pin.version,
        toolchain.rustc.display()
    );
    let started = Instant::now();
    let target_dir = tools.join("pydantic-core-target");
    let mut cargo = Command::new(&toolchain.cargo);
    cargo.current_dir(&source).args([
        "rustc",
        "--release",
        "--locked",
        "--lib",
        "--target",
        "wasm32-wasip1",
        "-Zbuild-std=std,panic_abort",
        "--crate-type",
        "staticlib",
    ]);
    clean_env(&mut cargo);
    cargo
        // After clean_env, which takes out the outer build's own CARGO_TARGET_DIR, if it has one.
        .env("CARGO_TARGET_DIR", &target_dir)
        // Debian's cargo and rustc are stable releases: -Zbuild-std needs this.
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTC", &toolchain.rustc)
        // pydantic-core's own release profile (fat LTO, one codegen unit) is kept: sixteen
        // units without LTO took as long here (584 s against 583 s, load 4, most of it the
        // standard library and the dependencies) and made the library 9.6 MB instead of 5.4.
        // Position-independent code for the library and, through -Zbuild-std, for std.
        .env("RUSTFLAGS", "-C relocation-model=pic")
        // PyO3 compiles for the guest's interpreter, not for the machine's python3.
        .env("PYO3_CROSS_PYTHON_VERSION", python.version)
        .env("PYO3_CROSS_PYTHON_IMPLEMENTATION", "CPython")
        .env("PYO3_BUILD_EXTENSION_MODULE", "1");
    run(&mut cargo, "compile pydantic-core for wasm32-wasip1");

    let staticlib = target_dir.join("wasm32-wasip1/release/lib_pydantic_core.a");
    let tmp = built.with_extension("so.tmp");
    if let Some(dir) = built.parent() {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    }
    run(
        Command::new(&toolchain.wasm_ld)
            .args([
                "--experimental-pic",
                "-shared",
                // CPython's C API and libc: imports, resolved when componentize-py links the guest.
                "--unresolved-symbols=import-dynamic",
                "-o",
            ])
            .arg(&tmp)
            .arg("--whole-archive")
            .arg(&staticlib),
        "link pydantic-core into a WebAssembly shared library",
    );
    let bytes = fs::read(&tmp).expect("read the linked pydantic-core");
    if let Err(why) = check_shared_library(&bytes) {
        panic!("the linked pydantic-core ({}) {why}", tmp.display());
    }
    fs::rename(&tmp, &built).expect("store the compiled pydantic-core");
    // The library is what is kept; the build folder is large.
    let _ = fs::remove_dir_all(&target_dir);
    println!(
        "cargo:warning=compiled pydantic-core {} for the sandbox in {} s ({} bytes, cached as {})",
        pin.version,
        started.elapsed().as_secs(),
        bytes.len(),
        built.display()
    );
    (built, key)
}

/// Stops the build when the sdist asks for a newer Rust than the toolchain has.
fn check_rust_version(source: &Path, toolchain: &Toolchain) {
    let manifest = fs::read_to_string(source.join("Cargo.toml")).expect("read Cargo.toml");
    let Some(wanted) = manifest.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "rust-version").then(|| value.trim().trim_matches('"').to_string())
    }) else {
        return;
    };
    let parts = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    assert!(
        parts(&toolchain.release) >= parts(&wanted),
        "pydantic-core needs Rust {wanted}, and {} is {}: pin an older pydantic/pydantic-core pair in host/guest-packages.txt, or upgrade Debian's rustc-web",
        toolchain.rustc.display(),
        toolchain.release
    );
}

/// Whether `bytes` is what componentize-py links as an extension: a WebAssembly module whose
/// first section is `dylink.0` and which exports the module's init function.
fn check_shared_library(bytes: &[u8]) -> Result<(), String> {
    let mut first = true;
    let mut init = false;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("is not valid WebAssembly: {e}"))?;
        match payload {
            wasmparser::Payload::Version { .. } => continue,
            wasmparser::Payload::CustomSection(section) if first => {
                if section.name() != "dylink.0" {
                    return Err("does not start with a dylink.0 section".into());
                }
            }
            wasmparser::Payload::ExportSection(exports) => {
                for export in exports {
                    let export = export.map_err(|e| e.to_string())?;
                    init |=
                        export.name == CORE_INIT && export.kind == wasmparser::ExternalKind::Func;
                }
            }
            _ if first => return Err("does not start with a dylink.0 section".into()),
            _ => {}
        }
        first = false;
    }
    if !init {
        return Err(format!("does not export {CORE_INIT}"));
    }
    Ok(())
}

/// Takes out of `command`'s environment what the outer cargo set for this build script, so
/// that the inner cargo, rustc and pip see their own defaults.
fn clean_env(command: &mut Command) {
    for (name, _) in env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let cargo_own = name.starts_with("CARGO_")
            && name != "CARGO_HOME"
            && !name.starts_with("CARGO_HTTP_")
            && !name.starts_with("CARGO_NET_")
            && !name.starts_with("CARGO_REGISTRIES_")
            && !name.starts_with("CARGO_REGISTRY_");
        let build_script_own = matches!(
            name,
            "RUSTC"
                | "RUSTC_WRAPPER"
                | "RUSTC_WORKSPACE_WRAPPER"
                | "RUSTC_LINKER"
                | "RUSTFLAGS"
                | "RUSTDOC"
                | "RUSTDOCFLAGS"
                | "RUSTUP_TOOLCHAIN"
                | "TARGET"
                | "HOST"
                | "OUT_DIR"
                | "OPT_LEVEL"
                | "PROFILE"
                | "DEBUG"
                | "NUM_JOBS"
                | "MAKEFLAGS"
                | "MFLAGS"
        ) || name.starts_with("DEP_");
        if cargo_own || build_script_own {
            command.env_remove(name);
        }
    }
}

fn run(command: &mut Command, what: &str) {
    // A build script's standard output is read by cargo for its `cargo:` lines.
    let status = command
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .unwrap_or_else(|e| panic!("{what}: cannot run {:?}: {e}", command.get_program()));
    assert!(status.success(), "{what} failed ({status})");
}
