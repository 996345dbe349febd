//! External tools some tests need: a Python venv with pinned packages from PyPI
//! (`tests/.venv`, from `tests/openapi/requirements.txt`: the OpenAPI validators, schemathesis,
//! and FastAPI with uvicorn for the port comparison).
//!
//! A fresh machine may lack them. Without them a test prints a loud `SKIPPED` and passes,
//! unless `FILEROUTER_REQUIRE_BROWSER=1` (CI sets it), where a missing tool is a failure.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The repository root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Whether the tool-dependent tests must run (CI): then a missing tool fails them.
pub fn required() -> bool {
    std::env::var("FILEROUTER_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

/// Fail (in CI) or skip loudly (elsewhere) because `what` is missing. Returns nothing to run.
pub fn missing(test: &str, what: &str, install: &str) {
    if required() {
        panic!("{test}: {what} (FILEROUTER_REQUIRE_BROWSER=1; install {install})");
    }
    eprintln!(
        "\n!!!!!!!!\nSKIPPED: {test}: {what} (install {install}; FILEROUTER_REQUIRE_BROWSER=1 makes this a failure)\n!!!!!!!!\n"
    );
}

/// Run `command` to completion: its stdout, or what went wrong.
pub fn run_tool(command: &mut Command) -> Result<String, String> {
    match command.output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => Err(format!(
            "{command:?} exited {}:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => Err(format!("{command:?}: {e}")),
    }
}

/// `tests/.venv` with the pinned `tests/openapi/requirements.txt` installed (once; a marker
/// file records which requirements are in it). Err says what is missing. Test binaries run in
/// parallel, so the venv is made under a lock file.
pub fn python_venv() -> Result<PathBuf, String> {
    let root = workspace();
    let venv = root.join("tests/.venv");
    let requirements = root.join("tests/openapi/requirements.txt");
    let wanted =
        std::fs::read_to_string(&requirements).map_err(|e| format!("{requirements:?}: {e}"))?;
    let marker = venv.join("filerouter-requirements.txt");
    let python = venv.join("bin/python");
    let ready =
        || python.exists() && std::fs::read_to_string(&marker).is_ok_and(|have| have == wanted);
    if ready() {
        return Ok(venv);
    }
    let _lock = VenvLock::take(&root.join("tests/.venv.lock"));
    if ready() {
        return Ok(venv);
    }
    run_tool(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
    )
    .map_err(|e| format!("cannot create a venv with python3 (python3 and python3-venv): {e}"))?;
    run_tool(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
    )
    .map_err(|e| format!("pip install of the pinned test tools failed: {e}"))?;
    std::fs::write(&marker, wanted).map_err(|e| e.to_string())?;
    Ok(venv)
}

/// An exclusive lock between test processes: a directory created atomically, removed on drop.
struct VenvLock(PathBuf);

impl VenvLock {
    fn take(path: &Path) -> VenvLock {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(900);
        while std::fs::create_dir(path).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        VenvLock(path.to_path_buf())
    }
}

impl Drop for VenvLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `node` with `tests/browser`'s packages (`npm ci` once), and the Chromium the browser tests
/// drive (`FILEROUTER_CHROMIUM`, else `/usr/bin/chromium`): the browser and the scripts'
/// folder, or what is missing.
pub fn browser() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("FILEROUTER_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        return Err(format!("no Chromium at {}", chromium.display()));
    }
    run_tool(Command::new("node").arg("--version")).map_err(|_| "no node".to_string())?;
    let dir = workspace().join("tests/browser");
    let _lock = VenvLock::take(&workspace().join("tests/browser.lock"));
    if !dir.join("node_modules/playwright-core").exists() {
        run_tool(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir),
        )
        .map_err(|e| format!("npm ci in tests/browser failed (npm and the npm registry): {e}"))?;
    }
    Ok((chromium, dir))
}
