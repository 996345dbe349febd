//! The project's own pure-Python packages: `.packages/`, filled by `filerouter packages
//! install` from `requirements.txt` (or `pyproject.toml`'s `[project] dependencies`) with the
//! user's pip or uv.
//!
//! `dev` mounts the folder read-only at `/packages` in every instance ([`mounted`]); `build`
//! bakes its files into the snapshot ([`files`]), so `run` imports them at no cost. The sandbox
//! runs CPython compiled to WebAssembly, which cannot load native extension modules: a
//! distribution with native code is built again from source without a C compiler (the way to
//! a package's pure-Python fallback, such as MarkupSafe's), and refused, by name and reason,
//! if it still has native code. Not for: running anything of the project (pip runs on the
//! host, as the user's own tool, like `commands` in config.py).

use std::{
    collections::BTreeSet,
    fmt, fs,
    path::{Path, PathBuf},
    process::Command,
};

/// The folder, relative to the project.
pub const DIR: &str = ".packages";

/// Why `packages install` did not install.
#[derive(Debug, thiserror::Error)]
pub enum PackagesError {
    #[error(
        "{0} has no requirements.txt and no [project] dependencies in pyproject.toml: list the packages the routes import there"
    )]
    NoRequirements(PathBuf),
    #[error("pyproject.toml: {0}")]
    Pyproject(String),
    #[error("{0}")]
    NoInstaller(String),
    #[error("`{command}` failed ({status}):\n{output}")]
    Installer {
        command: String,
        status: String,
        output: String,
    },
    #[error(
        "{} native code, which the sandbox cannot load (it runs CPython compiled to WebAssembly, which imports pure-Python packages only), and no pure-Python build of {} exists:\n  {}\nnothing was installed; .packages/ is as it was",
        if .0.len() == 1 { "a package has" } else { "packages have" },
        if .0.len() == 1 { "it" } else { "them" },
        .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  ")
    )]
    NativeCode(Vec<Native>),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}")]
    Read(String),
}

/// A distribution with native code, and what shows it.
#[derive(Debug, Clone)]
pub struct Native {
    pub name: String,
    pub version: String,
    /// "wheel tag cp311-cp311-manylinux_2_17_x86_64", "markupsafe/_speedups....so", ...
    pub evidence: Vec<String>,
}

impl fmt::Display for Native {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.name,
            self.version,
            self.evidence.join(", ")
        )
    }
}

/// One installed distribution.
#[derive(Debug, Clone)]
pub struct Dist {
    pub name: String,
    pub version: String,
    /// Built here from its source distribution without a C compiler (its native part left out).
    pub built_pure: bool,
}

/// Which tool installs: the user's pip (`python3 -m pip`, or another Python's) or uv.
#[derive(Debug, Clone)]
pub enum Installer {
    Pip { python: String },
    Uv,
}

impl Installer {
    /// `choice` is `pip`, `uv` or None (pip if the Python has it, else uv if it is on PATH).
    pub fn pick(choice: Option<&str>, python: Option<&str>) -> Result<Installer, PackagesError> {
        let python = python.unwrap_or("python3").to_string();
        let has_pip = || {
            Command::new(&python)
                .args(["-m", "pip", "--version"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let has_uv = || {
            Command::new("uv")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        match choice {
            Some("pip") if has_pip() => Ok(Installer::Pip { python }),
            Some("pip") => Err(PackagesError::NoInstaller(format!(
                "`{python} -m pip` does not run: install pip (python3-pip), or use --installer uv"
            ))),
            Some("uv") if has_uv() => Ok(Installer::Uv),
            Some("uv") => Err(PackagesError::NoInstaller(
                "`uv` is not on PATH: install it (https://docs.astral.sh/uv/), or use --installer pip".into(),
            )),
            Some(other) => Err(PackagesError::NoInstaller(format!(
                "unknown installer `{other}`: use pip or uv"
            ))),
            None if has_pip() => Ok(Installer::Pip { python }),
            None if has_uv() => Ok(Installer::Uv),
            None => Err(PackagesError::NoInstaller(format!(
                "neither `{python} -m pip` nor `uv` runs here: install pip (python3-pip) or uv"
            ))),
        }
    }

    fn command(
        &self,
        target: &Path,
        requirements: &Requirements,
        no_binary: &BTreeSet<String>,
    ) -> Command {
        let mut command = match self {
            Installer::Pip { python } => {
                let mut c = Command::new(python);
                c.args([
                    "-m",
                    "pip",
                    "install",
                    "--no-compile",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "--no-warn-script-location",
                    "--no-input",
                    "--quiet",
                    "--target",
                ]);
                c.arg(target);
                if !no_binary.is_empty() {
                    c.arg("--no-binary")
                        .arg(no_binary.iter().cloned().collect::<Vec<_>>().join(","));
                }
                c
            }
            Installer::Uv => {
                let mut c = Command::new("uv");
                c.args(["pip", "install", "--no-cache", "--quiet", "--target"]);
                c.arg(target);
                for name in no_binary {
                    c.args(["--no-binary-package", name]);
                }
                c
            }
        };
        match requirements {
            Requirements::File(path) => {
                command.arg("-r").arg(path);
            }
            Requirements::List(list) => {
                command.args(list);
            }
        }
        if !no_binary.is_empty() {
            // Building from source without a compiler: optional C extensions fail to build and
            // the package's pure-Python build is what gets installed.
            command
                .env("CC", "false")
                .env("CXX", "false")
                .env("LDSHARED", "false");
        }
        command
    }

    fn name(&self) -> &'static str {
        match self {
            Installer::Pip { .. } => "pip",
            Installer::Uv => "uv pip",
        }
    }
}

/// What to install.
#[derive(Debug, Clone)]
pub enum Requirements {
    /// A requirements file (`requirements.txt`).
    File(PathBuf),
    /// Requirement strings from `pyproject.toml`.
    List(Vec<String>),
}

impl Requirements {
    /// `requirements.txt` in `root`, else `pyproject.toml`'s `[project] dependencies`.
    pub fn find(root: &Path) -> Result<Requirements, PackagesError> {
        let txt = root.join("requirements.txt");
        if txt.is_file() {
            return Ok(Requirements::File(txt));
        }
        let pyproject = root.join("pyproject.toml");
        if pyproject.is_file() {
            let text = fs::read_to_string(&pyproject)
                .map_err(|e| PackagesError::Io(pyproject.display().to_string(), e))?;
            let value: toml::Table =
                toml::from_str(&text).map_err(|e| PackagesError::Pyproject(e.to_string()))?;
            let deps = value
                .get("project")
                .and_then(|p| p.get("dependencies"))
                .and_then(|d| d.as_array());
            if let Some(deps) = deps {
                let list: Vec<String> = deps
                    .iter()
                    .map(|d| {
                        d.as_str().map(str::to_string).ok_or_else(|| {
                            PackagesError::Pyproject(format!(
                                "[project] dependencies must be strings, found {d:?}"
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?;
                if !list.is_empty() {
                    return Ok(Requirements::List(list));
                }
            }
        }
        Err(PackagesError::NoRequirements(root.to_path_buf()))
    }
}

/// The project's package folder, if `routes_dir`'s project has one: what `dev` mounts.
pub fn mounted(routes_dir: &Path) -> Option<PathBuf> {
    let dir = routes_dir.parent()?.join(DIR);
    dir.is_dir().then_some(dir)
}

/// Every file of the project's `.packages/`, as (path relative to it, bytes), sorted: what
/// `build` bakes. Empty when there is none. Compiled files and scripts are left out.
pub fn files(root: &Path) -> Result<Vec<(String, Vec<u8>)>, PackagesError> {
    let base = root.join(DIR);
    let mut out = Vec::new();
    if !base.is_dir() {
        return Ok(out);
    }
    let mut stack = vec![(base.clone(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries =
            fs::read_dir(&dir).map_err(|e| PackagesError::Io(dir.display().to_string(), e))?;
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let rel_name = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if name != "__pycache__" && !(rel.is_empty() && name == "bin") {
                    stack.push((entry.path(), rel_name));
                }
            } else if kind.is_file() && !name.ends_with(".pyc") {
                // Links and special files are left out; regular ones are read within a bound.
                let bytes =
                    crate::regular_file::read(&entry.path(), crate::regular_file::MAX_SOURCE_BYTES)
                        .map_err(|e| PackagesError::Read(format!("{DIR}/{rel_name}: {e}")))?;
                out.push((rel_name, bytes));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Install the project's requirements into `.packages/` with `installer`, refusing native
/// code. `.packages/` is replaced only when everything succeeded.
pub fn install(root: &Path, installer: &Installer) -> Result<Vec<Dist>, PackagesError> {
    let requirements = Requirements::find(root)?;
    let staging = root.join(".packages.new");
    let mut no_binary: BTreeSet<String> = BTreeSet::new();
    let dists = loop {
        remove(&staging)?;
        let mut command = installer.command(&staging, &requirements, &no_binary);
        command.current_dir(root);
        let shown = format!("{command:?}");
        let output = command.output().map_err(|e| {
            PackagesError::NoInstaller(format!("cannot run {}: {e}", installer.name()))
        })?;
        if !output.status.success() {
            remove(&staging)?;
            let mut text = String::from_utf8_lossy(&output.stderr).to_string();
            text.push_str(&String::from_utf8_lossy(&output.stdout));
            if !no_binary.is_empty() {
                text.push_str(&format!(
                    "\n(filerouter was building {} from source without a C compiler, because its wheels carry native code the sandbox cannot load)",
                    no_binary.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            return Err(PackagesError::Installer {
                command: shown,
                status: output.status.to_string(),
                output: tail(&text, 40),
            });
        }
        let found = inspect(&staging)?;
        let native: Vec<Native> = found.iter().filter_map(|(_, n)| n.clone()).collect();
        if native.is_empty() {
            break found;
        }
        let fresh: Vec<String> = native
            .iter()
            .map(|n| normalize(&n.name))
            .filter(|n| !no_binary.contains(n))
            .collect();
        if fresh.is_empty() {
            remove(&staging)?;
            return Err(PackagesError::NativeCode(native));
        }
        no_binary.extend(fresh);
    };
    for leftover in ["bin", "__pycache__"] {
        remove(&staging.join(leftover))?;
    }
    let target = root.join(DIR);
    let old = root.join(".packages.old");
    remove(&old)?;
    if target.exists() {
        fs::rename(&target, &old)
            .map_err(|e| PackagesError::Io(target.display().to_string(), e))?;
    }
    fs::rename(&staging, &target)
        .map_err(|e| PackagesError::Io(target.display().to_string(), e))?;
    remove(&old)?;
    Ok(dists
        .into_iter()
        .map(|(dist, _)| Dist {
            built_pure: no_binary.contains(&normalize(&dist.name)),
            ..dist
        })
        .collect())
}

/// A distribution name as pip compares them (PEP 503).
fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

fn remove(path: &Path) -> Result<(), PackagesError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PackagesError::Io(path.display().to_string(), e)),
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The distributions installed in `dir` (from their `.dist-info`), each with its native code
/// if it has any.
fn inspect(dir: &Path) -> Result<Vec<(Dist, Option<Native>)>, PackagesError> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(PackagesError::Io(dir.display().to_string(), e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.ends_with(".dist-info") {
            continue;
        }
        let info = entry.path();
        let read = |file: &str| fs::read_to_string(info.join(file)).unwrap_or_default();
        let metadata = read("METADATA");
        let field = |key: &str| {
            metadata
                .lines()
                .take_while(|l| !l.is_empty())
                .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
                .unwrap_or_default()
        };
        let dist = Dist {
            name: field("Name:"),
            version: field("Version:"),
            built_pure: false,
        };
        let mut evidence = Vec::new();
        for tag in read("WHEEL").lines().filter_map(|l| l.strip_prefix("Tag:")) {
            let tag = tag.trim();
            if !tag.ends_with("-none-any") {
                evidence.push(format!("wheel tag {tag} (not py3-none-any)"));
            }
        }
        for line in read("RECORD").lines() {
            let path = line.split(',').next().unwrap_or_default();
            if is_native(path) {
                evidence.push(format!("native file {path}"));
            }
        }
        let native = (!evidence.is_empty()).then(|| Native {
            name: dist.name.clone(),
            version: dist.version.clone(),
            evidence,
        });
        out.push((dist, native));
    }
    out.sort_by_key(|a| normalize(&a.0.name));
    Ok(out)
}

/// Whether a file is compiled native code (an extension module or shared library).
fn is_native(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let file = lower.rsplit('/').next().unwrap_or(&lower);
    [".so", ".pyd", ".dylib", ".dll", ".a"]
        .iter()
        .any(|ext| file.ends_with(ext))
        || file.contains(".so.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_files_are_recognized() {
        assert!(is_native(
            "markupsafe/_speedups.cpython-311-x86_64-linux-gnu.so"
        ));
        assert!(is_native("pkg/lib.so.1"));
        assert!(is_native("pkg/_x.pyd"));
        assert!(!is_native("markupsafe/_speedups.c"));
        assert!(!is_native("markupsafe/_speedups.pyi"));
        assert!(!is_native("jinja2/sonnet.py"));
    }

    #[test]
    fn names_compare_as_pip_does() {
        assert_eq!(normalize("MarkupSafe"), "markupsafe");
        assert_eq!(normalize("python_dateutil"), "python-dateutil");
        assert_eq!(normalize("zope.interface"), "zope-interface");
    }

    #[test]
    fn a_wheel_with_an_extension_is_native() {
        let dir = tempfile::tempdir().unwrap();
        let info = dir.path().join("MarkupSafe-3.0.4.dist-info");
        fs::create_dir_all(&info).unwrap();
        fs::write(
            info.join("METADATA"),
            "Metadata-Version: 2.1\nName: MarkupSafe\nVersion: 3.0.4\n\nbody",
        )
        .unwrap();
        fs::write(
            info.join("WHEEL"),
            "Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_17_x86_64\n",
        )
        .unwrap();
        fs::write(
            info.join("RECORD"),
            "markupsafe/__init__.py,sha256=x,1\nmarkupsafe/_speedups.cpython-311-x86_64-linux-gnu.so,sha256=y,2\n",
        )
        .unwrap();
        let pure = dir.path().join("Jinja2-3.1.6.dist-info");
        fs::create_dir_all(&pure).unwrap();
        fs::write(pure.join("METADATA"), "Name: Jinja2\nVersion: 3.1.6\n").unwrap();
        fs::write(pure.join("WHEEL"), "Tag: py3-none-any\n").unwrap();
        fs::write(pure.join("RECORD"), "jinja2/__init__.py,,\n").unwrap();
        let found = inspect(dir.path()).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0.name, "Jinja2");
        assert!(found[0].1.is_none());
        let native = found[1].1.as_ref().unwrap().to_string();
        assert!(
            native.starts_with("MarkupSafe 3.0.4: wheel tag cp311"),
            "{native}"
        );
        assert!(
            native.contains("_speedups.cpython-311-x86_64-linux-gnu.so"),
            "{native}"
        );
    }
}
