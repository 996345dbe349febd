//! The Rust toolchain that compiles pydantic-core for the sandbox (`wasm32-wasip1`), found or
//! installed. Not for: compiling anything (`bundled.rs` does).
//!
//! rustup cannot add a wasm target on every machine (ours have no route to its servers), so the
//! guest uses Debian's own packages: `rustc-web`, `cargo-web` and `rust-web-src` (a compiler,
//! cargo, and the standard library's sources, for `-Zbuild-std`), and the `wasm-ld` of the LLVM
//! that compiler was built with (`lld-N`, N from `rustc -vV`). When one is missing and the build
//! runs as root on a machine with `apt-get`, it installs them and says so in a cargo warning
//! (`FILEROUTER_NO_APT=1` turns that off); otherwise it stops with the `apt-get install` line to
//! run. It never lets the guest be built without pydantic.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

const RUSTC: &str = "/usr/bin/rustc";
const CARGO: &str = "/usr/bin/cargo";

/// The programs that build pydantic-core, and what identifies them for the build cache.
pub struct Toolchain {
    pub rustc: PathBuf,
    pub cargo: PathBuf,
    pub wasm_ld: PathBuf,
    /// `rustc -vV`'s release, e.g. `1.96.0`.
    pub release: String,
    /// The versions of all three, for cache keys.
    pub identity: String,
}

/// What [`find`] found missing: Debian packages to install.
struct Missing {
    packages: Vec<String>,
    what: Vec<String>,
}

/// The toolchain, installing Debian's packages first if they are missing and the build may.
pub fn find_or_install() -> Toolchain {
    println!("cargo:rerun-if-env-changed=FILEROUTER_NO_APT");
    // Two rounds: `lld-N` can only be named once `rustc-web` is there to say its LLVM version.
    for _ in 0..2 {
        let missing = match find() {
            Ok(found) => return watched(found),
            Err(missing) => missing,
        };
        if let Err(why) = may_install() {
            panic!("{}", explain(&missing, &why));
        }
        println!(
            "cargo:warning=installing Debian packages {} with apt-get, to compile pydantic-core for the sandbox (once; FILEROUTER_NO_APT=1 stops the build instead)",
            missing.packages.join(" ")
        );
        apt_install(&missing);
    }
    match find() {
        Ok(found) => watched(found),
        Err(missing) => panic!(
            "{}",
            explain(&missing, "apt-get ran, yet they are still missing")
        ),
    }
}

/// An upgrade of the toolchain (apt's) runs the build script again: the compiled
/// pydantic-core is keyed by the toolchain's versions.
fn watched(toolchain: Toolchain) -> Toolchain {
    for path in [&toolchain.rustc, &toolchain.cargo, &toolchain.wasm_ld] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    toolchain
}

fn find() -> Result<Toolchain, Missing> {
    let mut missing = Missing {
        packages: Vec::new(),
        what: Vec::new(),
    };
    let verbose = output(Command::new(RUSTC).arg("-vV"));
    let Some(verbose) = verbose else {
        missing.packages.extend(
            ["rustc-web", "cargo-web", "rust-web-src"]
                .iter()
                .map(|s| s.to_string()),
        );
        missing.what.push(format!("{RUSTC} (rustc-web)"));
        return Err(missing);
    };
    let field = |name: &str| {
        verbose
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    let release = field("release:").unwrap_or_default();
    let llvm_major = field("LLVM version:")
        .and_then(|v| v.split('.').next().map(str::to_string))
        .unwrap_or_default();
    let cargo_version = output(Command::new(CARGO).arg("-V"));
    if cargo_version.is_none() {
        missing.packages.push("cargo-web".into());
        missing.what.push(format!("{CARGO} (cargo-web)"));
    }
    let sysroot = output(Command::new(RUSTC).args(["--print", "sysroot"]))
        .map(|s| PathBuf::from(s.trim()))
        .unwrap_or_else(|| PathBuf::from("/usr"));
    let library = sysroot.join("lib/rustlib/src/rust/library");
    if !library.join("Cargo.toml").exists() && !library.join("std/Cargo.toml").exists() {
        missing.packages.push("rust-web-src".into());
        missing.what.push(format!(
            "the standard library's sources in {} (rust-web-src)",
            library.display()
        ));
    }
    let wasm_ld = PathBuf::from(format!("/usr/lib/llvm-{llvm_major}/bin/wasm-ld"));
    let ld_version = output(Command::new(&wasm_ld).arg("--version"));
    if ld_version.is_none() {
        missing.packages.push(format!("lld-{llvm_major}"));
        missing.what.push(format!(
            "{} (lld-{llvm_major}: the linker of LLVM {llvm_major}, which {RUSTC} uses)",
            wasm_ld.display()
        ));
    }
    if !missing.packages.is_empty() {
        return Err(missing);
    }
    Ok(Toolchain {
        rustc: RUSTC.into(),
        cargo: CARGO.into(),
        identity: format!(
            "{verbose}\n{}\n{}",
            cargo_version.unwrap_or_default().trim(),
            ld_version.unwrap_or_default().trim()
        ),
        wasm_ld,
        release,
    })
}

/// Whether this build may run apt-get, or why not.
fn may_install() -> Result<(), String> {
    if env::var_os("FILEROUTER_NO_APT").is_some_and(|v| !v.is_empty() && v != "0") {
        return Err("FILEROUTER_NO_APT is set, so the build does not install them".into());
    }
    if !Path::new("/usr/bin/apt-get").exists() {
        return Err("this machine has no apt-get (they are Debian's packages)".into());
    }
    let uid = output(Command::new("id").arg("-u")).unwrap_or_default();
    if uid.trim() != "0" {
        return Err("the build does not run as root, so it cannot install them".into());
    }
    Ok(())
}

fn apt_install(missing: &Missing) {
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .unwrap_or_else(|e| panic!("run apt-get: {e}"))
    };
    // A failing third-party list need not stop the install: Debian's own lists are what counts.
    let status = apt(&["update", "-qq"]);
    if !status.success() {
        println!(
            "cargo:warning=`apt-get update` failed ({status}); installing from the lists at hand"
        );
    }
    let mut install = vec![
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        // Another apt (an unattended upgrade) may hold the lock for a while.
        "-o",
        "DPkg::Lock::Timeout=600",
    ];
    install.extend(missing.packages.iter().map(String::as_str));
    let status = apt(&install);
    assert!(
        status.success(),
        "`apt-get {}` failed ({status}): install them by hand",
        install.join(" ")
    );
}

fn explain(missing: &Missing, why: &str) -> String {
    let lld = if missing.packages.iter().any(|p| p == "rustc-web") {
        " and then `lld-N`, N being the LLVM major version `/usr/bin/rustc -vV` prints"
    } else {
        ""
    };
    format!(
        "building the guest compiles pydantic-core for the sandbox (wasm32-wasip1) with Debian's \
         WASI Rust toolchain, and this machine lacks: {}. {why}. Install it with \
         `sudo apt-get install {}`{lld}, then build again (README, \"Pydantic in the sandbox\")",
        missing.what.join("; "),
        missing.packages.join(" ")
    )
}

/// A command's standard output, if it ran and succeeded.
fn output(command: &mut Command) -> Option<String> {
    let out = command.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
