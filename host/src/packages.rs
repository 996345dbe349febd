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
//! host, as the user's own tool, like `commands` in config.py): a source the project names
//! (a path, an sdist, a VCS URL, an editable, an index of its own) would be built by running
//! its code here, and is refused before the installer runs (`sources`); distributions from
//! the user's own index are built as `pip install` builds them.
//!
//! With pip, environment markers are evaluated for the sandbox, not for the host: pip resolves
//! on the host only to report what it would install (`install --dry-run --report`), a script
//! run by the same Python (`RESOLVE`) walks the report's requirement graph from the project's
//! requirements, evaluating every marker against [`SANDBOX_MARKERS`], and exactly the
//! distributions the sandbox needs are installed, `--no-deps`. So SQLAlchemy 2.0's
//! `greenlet; platform_machine == "x86_64" or ...`, true on the host and false on wasm32, is
//! left out instead of refused, and a wheel with native code is known, and said, before
//! anything is built. uv has no WASI target and no report: with uv, markers are the host's.
//!
//! Nothing is ever compiled: the installer runs with the C compiler variables set to `false`
//! and, first on its `PATH`, stand-ins for the compilers and Rust's tools that fail at once
//! ([`NO_COMPILERS`]). A package with an optional extension falls back to pure Python; one whose
//! source needs a compiler (a Rust extension, say) fails to build within seconds instead of
//! compiling for minutes, and is refused by name ([`PackagesError::NeedsCompiler`]).
//! With pip, a requirement on a distribution the sandbox has its own module for ([`PROVIDED`]:
//! `bcrypt`, `argon2-cffi`, directly or through extras such as `passlib[bcrypt]`) is satisfied
//! by that module: it is said, and neither it nor what it requires is installed.
//!
//! The distributions built into the guest (pydantic, pydantic-core, and what pydantic imports:
//! [`bundled`]) are provided by the sandbox at one version each: pip (resolving) and uv
//! (installing) are held to exactly those versions by a constraints file, so a package that
//! requires pydantic resolves to a release that works with the guest's; none of them is
//! installed (with uv, or a pip without a report, what the installer put there is removed), and a
//! requirement that does not allow the guest's version is refused by name
//! ([`PackagesError::Bundled`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::OsString,
    fmt, fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde::Deserialize;

pub mod bundled;
mod sources;

/// The folder, relative to the project.
pub const DIR: &str = ".packages";

/// The sandbox's Python as environment markers (PEP 508) see it, what every marker of a
/// requirement is evaluated against: CPython 3.14.0 (componentize-py 0.25.1's, see
/// `guest-python/build/build.rs`) built for wasm32-wasip2. `sys.platform` is `wasi` and `os.name` `posix`;
/// `platform.system()`, `release()`, `version()` and `machine()` are `os.uname()`'s fields,
/// which wasi-libc fills with fixed values (`wasi`, `0.0.0`, `0.0.0`, `wasm32`) and
/// `platform.uname()` passes on unchanged. Update with the componentize-py pin.
pub const SANDBOX_MARKERS: &[(&str, &str)] = &[
    ("implementation_name", "cpython"),
    ("implementation_version", "3.14.0"),
    ("os_name", "posix"),
    ("platform_machine", "wasm32"),
    ("platform_python_implementation", "CPython"),
    ("platform_release", "0.0.0"),
    ("platform_system", "wasi"),
    ("platform_version", "0.0.0"),
    ("python_full_version", "3.14.0"),
    ("python_version", "3.14"),
    ("sys_platform", "wasi"),
];

/// Distributions the sandbox has its own module for, by their normalized name, with what takes
/// their place: a requirement on one (`passlib[bcrypt]`, `pwdlib[argon2]`, `bcrypt` itself) is
/// satisfied without installing it, or anything it requires. PyPI's are native code the sandbox
/// cannot load; the sandbox's compute on the host (`crate::passwords`).
pub const PROVIDED: &[(&str, &str)] = &[
    (
        "bcrypt",
        "the sandbox has its own `bcrypt` module (PyPI bcrypt's API, computed by the host at native speed)",
    ),
    (
        "argon2-cffi",
        "the sandbox has its own `argon2` module (argon2-cffi's API, computed by the host at native speed)",
    ),
];

/// How many times pip resolves again with requirements the sandbox needs that the host's
/// resolution left out (their marker is false on the host, true in the sandbox).
const ROUNDS: usize = 4;

/// The scratch folder of an install (the constraints, pip's report), relative to the project;
/// removed after.
const SCRATCH: &str = ".packages.resolve";

/// The constraints file in [`SCRATCH`]: [`bundled::constraints`].
const CONSTRAINTS: &str = "sandbox-constraints.txt";

/// The folder of the compiler stand-ins put first on the installer's `PATH`, relative to the
/// project; removed after. Each prints [`NO_COMPILER`] and fails.
const NO_COMPILERS: &str = ".packages.nocompilers";

/// What the stand-ins print: the sign, in the installer's output, that a build needed one.
const NO_COMPILER: &str = "filerouter: no compiler while installing for the sandbox";

/// The tools a build of native code runs, by the names it finds them on `PATH`.
const COMPILERS: &[&str] = &[
    "cc", "c++", "gcc", "g++", "clang", "clang++", "gfortran", "cargo", "rustc", "rustup", "go",
    "zig", "cmake", "ninja", "meson",
];

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
    #[error(
        "{} to build from source, and the sandbox cannot load native code (it runs CPython compiled to WebAssembly, which imports pure-Python packages only), so {} cannot be installed for it; filerouter installs with compilers blocked, so nothing was compiled:\n  {}\nnothing was installed; .packages/ is as it was\n\nthe installer's output ends with:\n{}",
        if .0.len() == 1 { "a package needs a compiler" } else { "packages need a compiler" },
        if .0.len() == 1 { "it" } else { "they" },
        .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "),
        .1
    )]
    NeedsCompiler(Vec<Native>, String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}")]
    Read(String),
    #[error("resolving the requirements for the sandbox: {0}")]
    Resolve(String),
    /// Sources the project names that would be built on this machine (`sources`).
    #[error(
        "{} a source the project names, which would be built on this machine, running the build code it holds (setup.py or a build backend), so nothing was run:\n  {}\nnothing was installed; .packages/ is as it was",
        if .0.len() == 1 { "a requirement names" } else { "requirements name" },
        .0.join("\n  ")
    )]
    ProjectSource(Vec<String>),
    /// Requirements that do not allow the guest's version of a distribution built into it
    /// ([`bundled`]).
    #[error(
        "{} another version of what the sandbox has built in, {}, and routes import the sandbox's whatever is installed, so no other version can be installed for them:\n  {}\nnothing was installed; .packages/ is as it was",
        if .0.len() == 1 { "a requirement asks for" } else { "requirements ask for" },
        bundled::described(&.0.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()),
        .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  ")
    )]
    Bundled(Vec<bundled::Conflict>),
    /// The installer, held to the guest's versions, found no resolution, and named a bundled
    /// distribution (uv, or a pip whose report did not say which requirement).
    #[error(
        "the requirements cannot be met with what the sandbox has built in, {}, which {installer} was held to (routes import the sandbox's whatever is installed, so no other version can be installed for them): allow those versions in the requirements, and leave open the version of a package that requires another (the newest release that works with them is then chosen)\nnothing was installed; .packages/ is as it was\n\n{installer} says:\n{output}",
        bundled::described(.names)
    )]
    BundledUnresolvable {
        installer: String,
        names: Vec<String>,
        output: String,
    },
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
        f.write_str(&self.name)?;
        if !self.version.is_empty() {
            write!(f, " {}", self.version)?;
        }
        write!(f, ": {}", self.evidence.join(", "))
    }
}

/// What `install` says as it goes, before it installs (the CLI prints each as it comes).
#[derive(Debug, Clone)]
pub enum Note {
    /// A distribution the host's resolution includes that the sandbox does not need: every
    /// requirement on it has a marker that is false in the sandbox.
    Skipped(Skipped),
    /// A distribution whose wheel, as pip chose it, is for one platform (native code): it is
    /// built from source without a C compiler, for its pure-Python fallback if it has one.
    NativeWheel {
        name: String,
        version: String,
        wheel: String,
    },
    /// A distribution with no wheel to install: it is built from its source, without a
    /// compiler.
    FromSource { name: String, version: String },
    /// Requirements the sandbox needs that the host's resolution left out (their marker is
    /// false on the host): pip resolves again with them.
    Resolving(Vec<String>),
    /// Markers are evaluated for the host, not the sandbox (uv, or a pip without `--report`),
    /// and why.
    HostMarkers(String),
    /// A distribution the sandbox has its own module for ([`PROVIDED`]): not installed.
    Provided(Provided),
    /// A distribution built into the guest ([`bundled`]): the guest's version is used, nothing
    /// installed.
    Bundled(bundled::Provided),
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Skipped(skipped) => write!(f, "{skipped}"),
            Note::NativeWheel {
                name,
                version,
                wheel,
            } => write!(
                f,
                "{name} {version}: its wheel {wheel} has native code, which the sandbox cannot load: building {name} from source without a C compiler (for its pure-Python fallback, if it has one)"
            ),
            Note::FromSource { name, version } => write!(
                f,
                "{name} {version}: no wheel to install, so it is built from its source, without a compiler (the sandbox cannot load native code)"
            ),
            Note::Resolving(requirements) => write!(
                f,
                "the sandbox also needs {} (the marker is true there, not on this machine): resolving again",
                requirements.join(", ")
            ),
            Note::HostMarkers(why) => f.write_str(why),
            Note::Provided(provided) => write!(f, "{provided}"),
            Note::Bundled(provided) => write!(f, "{provided}"),
        }
    }
}

/// A distribution left out because the sandbox does not need it.
#[derive(Debug, Clone, Deserialize)]
pub struct Skipped {
    pub name: String,
    pub version: String,
    /// The requirements on it, each with a marker false in the sandbox; empty when only
    /// distributions that are left out themselves require it.
    pub reasons: Vec<SkipReason>,
}

/// A requirement whose marker is false in the sandbox.
#[derive(Debug, Clone, Deserialize)]
pub struct SkipReason {
    /// The distribution that has the requirement; None for the project's own requirements.
    pub by: Option<String>,
    pub marker: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = |reason: &SkipReason| match &reason.by {
            Some(by) => format!("{by}'s dependency"),
            None => "the project's requirement".to_string(),
        };
        match self.reasons.as_slice() {
            [] => write!(
                f,
                "{} {}: skipped, only packages that are not installed for the sandbox require it",
                self.name, self.version
            ),
            [reason] => write!(
                f,
                "{} {} ({}): skipped, its marker `{}` is false in the sandbox",
                self.name,
                self.version,
                whose(reason),
                reason.marker
            ),
            reasons => write!(
                f,
                "{} {}: skipped, its markers are false in the sandbox: {}",
                self.name,
                self.version,
                reasons
                    .iter()
                    .map(|r| format!("`{}` ({})", r.marker, whose(r)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// A distribution left out because the sandbox has its own module in its place.
#[derive(Debug, Clone, Deserialize)]
pub struct Provided {
    pub name: String,
    /// The version the host's resolution picked, when it picked one.
    pub version: Option<String>,
    /// The distribution whose requirement it is; None for the project's own requirement.
    pub by: Option<String>,
}

impl fmt::Display for Provided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = PROVIDED
            .iter()
            .find(|(name, _)| *name == normalize(&self.name))
            .map_or("the sandbox has its own module for it", |(_, what)| what);
        write!(f, "{}", self.name)?;
        if let Some(version) = &self.version {
            write!(f, " {version}")?;
        }
        match &self.by {
            Some(by) => write!(f, " ({by}'s dependency)")?,
            None => write!(f, " (the project's requirement)")?,
        }
        write!(f, ": not installed, {what}")
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

    /// The install of `what` (requirement arguments) into `target`, building `no_binary` from
    /// source, without a compiler: `surroundings` holds the stand-ins put first on `PATH`.
    ///
    /// The installer keeps its downloads and the wheels it builds in `cache`, filerouter's own
    /// folder for it ([`install`]), never in its usual cache: a wheel that an earlier plain
    /// `pip install` built there with a C compiler would be installed as it is, native code and
    /// all. Every install that writes `cache` runs without compilers, so each wheel built and
    /// kept there is a source distribution's pure-Python build, and the next install of the
    /// same release takes it instead of building it again (SQLAlchemy's: about 30 s of CPU).
    fn command(
        &self,
        target: &Path,
        what: &[OsString],
        no_binary: &BTreeSet<String>,
        surroundings: &Surroundings,
    ) -> Command {
        let Surroundings {
            no_compilers,
            cache,
        } = surroundings;
        let mut command = match self {
            Installer::Pip { python } => {
                let mut c = Command::new(python);
                c.args([
                    "-m",
                    "pip",
                    "install",
                    "--no-compile",
                    "--disable-pip-version-check",
                    "--no-warn-script-location",
                    "--no-input",
                    "--quiet",
                    "--cache-dir",
                ]);
                c.arg(cache.join("pip")).arg("--target").arg(target);
                if !no_binary.is_empty() {
                    c.arg("--no-binary")
                        .arg(no_binary.iter().cloned().collect::<Vec<_>>().join(","));
                }
                c
            }
            Installer::Uv => {
                let mut c = Command::new("uv");
                c.args(["pip", "install", "--quiet", "--cache-dir"]);
                c.arg(cache.join("uv")).arg("--target").arg(target);
                for name in no_binary {
                    c.args(["--no-binary-package", name]);
                }
                c
            }
        };
        command.args(what);
        // Whatever is built from source is built without a compiler: optional C extensions
        // fail to build and the package's pure-Python build is what gets installed; a build
        // that needs a compiler fails at once (nothing it could compile would load).
        let mut path = vec![no_compilers.to_path_buf()];
        path.extend(
            std::env::var_os("PATH")
                .map_or_else(Vec::new, |p| std::env::split_paths(&p).collect::<Vec<_>>()),
        );
        if let Ok(path) = std::env::join_paths(path) {
            command.env("PATH", path);
        }
        command
            .env("CC", "false")
            .env("CXX", "false")
            .env("LDSHARED", "false");
        command
    }

    fn name(&self) -> &'static str {
        match self {
            Installer::Pip { .. } => "pip",
            Installer::Uv => "uv pip",
        }
    }
}

/// What the installer runs with: the folder of compiler stand-ins put first on its `PATH`, and
/// filerouter's own folder for its cache (see [`Installer`]'s `command`).
struct Surroundings<'a> {
    no_compilers: &'a Path,
    cache: &'a Path,
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
            let text = crate::regular_file::read_to_string(
                &pyproject,
                crate::regular_file::MAX_PYPROJECT_BYTES,
            )
            .map_err(|e| PackagesError::Read(e.to_string()))?;
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

    /// As arguments of `pip install`.
    fn args(&self) -> Vec<OsString> {
        match self {
            Requirements::File(path) => vec!["-r".into(), path.clone().into_os_string()],
            Requirements::List(list) => list.iter().map(OsString::from).collect(),
        }
    }
}

/// How the guest's CPython names a module's compiled file in `__pycache__`.
const BYTECODE_SUFFIX: &str = ".cpython-314.pyc";

/// The project's package folder, if `routes_dir`'s project has one: what `dev` mounts.
pub fn mounted(routes_dir: &Path) -> Option<PathBuf> {
    let dir = routes_dir.parent()?.join(DIR);
    dir.is_dir().then_some(dir)
}

/// Every file of the project's `.packages/`, as (path relative to it, bytes), sorted: what
/// `build` bakes. Empty when there is none. Compiled files and scripts are left out: a build's
/// snapshot would keep the compiled files' bytes in its memory after its imports.
pub fn files(root: &Path) -> Result<Vec<(String, Vec<u8>)>, PackagesError> {
    collect(root, false)
}

/// [`files`], and the bytecode `packages install` compiled for this guest
/// (`__pycache__/*.cpython-314.pyc`): what `dev`'s snapshot of the packages, which compiles
/// every module, unmarshals instead (`guest-python/sandbox/bytecode.py`).
pub fn files_and_bytecode(root: &Path) -> Result<Vec<(String, Vec<u8>)>, PackagesError> {
    collect(root, true)
}

fn collect(root: &Path, bytecode: bool) -> Result<Vec<(String, Vec<u8>)>, PackagesError> {
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
            let in_cache = rel == "__pycache__" || rel.ends_with("/__pycache__");
            if kind.is_dir() {
                if (bytecode || name != "__pycache__") && !(rel.is_empty() && name == "bin") {
                    stack.push((entry.path(), rel_name));
                }
            } else if kind.is_file()
                && if in_cache {
                    name.ends_with(BYTECODE_SUFFIX)
                } else {
                    !name.ends_with(".pyc")
                }
            {
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
/// code, and tell `note` what is left out or built from source, before anything is installed.
/// `root` is absolute (the installer runs there). `.packages/` is replaced only when everything
/// succeeded. `cache` is filerouter's own folder for the installer's downloads and built wheels
/// (see [`Installer`]'s `command`), made if missing.
pub fn install(
    root: &Path,
    installer: &Installer,
    cache: &Path,
    note: &mut dyn FnMut(Note),
) -> Result<Vec<Dist>, PackagesError> {
    let requirements = Requirements::find(root)?;
    // Before the installer runs: resolving alone would run an sdist's build code.
    sources::check(root, &requirements)?;
    let scratch = root.join(SCRATCH);
    remove(&scratch)?;
    fs::create_dir_all(&scratch)
        .map_err(|e| PackagesError::Io(scratch.display().to_string(), e))?;
    let constraints = scratch.join(CONSTRAINTS);
    let installed = fs::write(&constraints, bundled::constraints())
        .map_err(|e| PackagesError::Io(constraints.display().to_string(), e))
        .and_then(|()| install_in(root, installer, &requirements, &scratch, cache, note));
    remove(&scratch)?;
    installed
}

/// [`install`] with its scratch folder, which holds [`CONSTRAINTS`].
fn install_in(
    root: &Path,
    installer: &Installer,
    requirements: &Requirements,
    scratch: &Path,
    cache: &Path,
    note: &mut dyn FnMut(Note),
) -> Result<Vec<Dist>, PackagesError> {
    let constraints = scratch.join(CONSTRAINTS);
    let staging = root.join(".packages.new");
    let mut no_binary: BTreeSet<String> = BTreeSet::new();
    // Built from source, by normalized name: the distribution and why, for a refusal.
    let mut from_source: BTreeMap<String, Native> = BTreeMap::new();
    let what: Vec<OsString> = match plan(root, installer, requirements, scratch, note)? {
        Some(plan) => {
            for provided in plan.bundled {
                note(Note::Bundled(provided));
            }
            for provided in plan.provided {
                note(Note::Provided(provided));
            }
            for skipped in plan.skipped {
                note(Note::Skipped(skipped));
            }
            let mut pins: Vec<OsString> = Vec::new();
            for pick in plan.install {
                // Known from the report before anything is installed: go to the source at once.
                if pick.native_wheel
                    && !pick.direct
                    && let Some(wheel) = &pick.wheel
                {
                    no_binary.insert(normalize(&pick.name));
                    from_source.insert(
                        normalize(&pick.name),
                        Native {
                            name: pick.name.clone(),
                            version: pick.version.clone(),
                            evidence: vec![format!("its wheel {wheel} has native code")],
                        },
                    );
                    note(Note::NativeWheel {
                        name: pick.name,
                        version: pick.version,
                        wheel: wheel.clone(),
                    });
                } else if pick.wheel.is_none() {
                    from_source.insert(
                        normalize(&pick.name),
                        Native {
                            name: pick.name.clone(),
                            version: pick.version.clone(),
                            evidence: vec!["it has no wheel".into()],
                        },
                    );
                    note(Note::FromSource {
                        name: pick.name,
                        version: pick.version,
                    });
                }
                pins.push(pick.requirement.into());
            }
            if pins.is_empty() {
                pins
            } else {
                let mut what = vec![OsString::from("--no-deps")];
                what.extend(plan.options.into_iter().map(OsString::from));
                what.extend(pins);
                what
            }
        }
        // Resolved and installed in one go, with the bundled distributions held to the guest's
        // versions (and removed after the install, `fill`).
        None => {
            let mut what = requirements.args();
            what.extend([OsString::from("-c"), constraints.into_os_string()]);
            what
        }
    };
    let dists = if what.is_empty() {
        // Every requirement's marker is false in the sandbox: nothing to install.
        remove(&staging)?;
        fs::create_dir_all(&staging)
            .map_err(|e| PackagesError::Io(staging.display().to_string(), e))?;
        Vec::new()
    } else {
        let no_compilers = root.join(NO_COMPILERS);
        let filled = stand_ins(&no_compilers).and_then(|()| {
            fill(
                root,
                &staging,
                installer,
                &what,
                &mut no_binary,
                &mut from_source,
                &Surroundings {
                    no_compilers: &no_compilers,
                    cache,
                },
            )
        });
        remove(&no_compilers)?;
        let (dists, stripped) = filled?;
        for provided in stripped {
            note(Note::Bundled(provided));
        }
        dists
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

/// Install `what` (requirement arguments) into `staging` until nothing installed has native
/// code: a distribution that has is installed again from source without a C compiler (added
/// to `no_binary`, which may already name distributions known to need it), and refused if it
/// still has. What the installer put there of the distributions built into the guest is
/// removed first, and returned ([`bundled::strip`]).
#[allow(clippy::type_complexity)]
fn fill(
    root: &Path,
    staging: &Path,
    installer: &Installer,
    what: &[OsString],
    no_binary: &mut BTreeSet<String>,
    from_source: &mut BTreeMap<String, Native>,
    surroundings: &Surroundings,
) -> Result<(Vec<(Dist, Option<Native>)>, Vec<bundled::Provided>), PackagesError> {
    loop {
        remove(staging)?;
        let mut command = installer.command(staging, what, no_binary, surroundings);
        command.current_dir(root);
        let shown = format!("{command:?}");
        let output = command.output().map_err(|e| {
            PackagesError::NoInstaller(format!("cannot run {}: {e}", installer.name()))
        })?;
        if !output.status.success() {
            remove(staging)?;
            let mut text = both(&output);
            let needing = needs_compiler(&text, from_source);
            if !needing.is_empty() {
                return Err(PackagesError::NeedsCompiler(needing, tail(&text, 30)));
            }
            // uv's and pip's words for a resolution that cannot be.
            let unresolvable = [
                "No solution found",
                "ResolutionImpossible",
                "conflicting dependencies",
                "unsatisfiable",
            ]
            .iter()
            .any(|sign| text.contains(sign));
            let named = bundled::named_in(&text);
            if unresolvable && !named.is_empty() && what.iter().any(|w| w == "-c") {
                return Err(PackagesError::BundledUnresolvable {
                    installer: installer.name().to_string(),
                    names: named,
                    output: tail(&text, 30),
                });
            }
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
        let stripped = bundled::strip(staging)?;
        let found = inspect(staging, no_binary)?;
        let native: Vec<Native> = found.iter().filter_map(|(_, n)| n.clone()).collect();
        if native.is_empty() {
            return Ok((found, stripped));
        }
        let fresh: Vec<&Native> = native
            .iter()
            .filter(|n| !no_binary.contains(&normalize(&n.name)))
            .collect();
        if fresh.is_empty() {
            remove(staging)?;
            return Err(PackagesError::NativeCode(native));
        }
        for found in fresh {
            no_binary.insert(normalize(&found.name));
            from_source.insert(
                normalize(&found.name),
                Native {
                    name: found.name.clone(),
                    version: found.version.clone(),
                    evidence: vec![format!(
                        "its wheel has native code ({})",
                        found.evidence.join(", ")
                    )],
                },
            );
        }
    }
}

/// Write the compiler stand-ins into `dir`: each prints [`NO_COMPILER`] and fails. (Elsewhere
/// than on Unix only the compiler variables are set.)
fn stand_ins(dir: &Path) -> Result<(), PackagesError> {
    remove(dir)?;
    fs::create_dir_all(dir).map_err(|e| PackagesError::Io(dir.display().to_string(), e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for name in COMPILERS {
            let path = dir.join(name);
            let script = format!(
                "#!/bin/sh\necho \"{NO_COMPILER} ({name}): the sandbox cannot load native code\" >&2\nexit 1\n"
            );
            fs::write(&path, script)
                .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o755)))
                .map_err(|e| PackagesError::Io(path.display().to_string(), e))?;
        }
    }
    Ok(())
}

/// The distributions whose build failed in the installer's `output` for want of a compiler,
/// each with why it was built from source: those pip names as failing to build, or, when it
/// names none, every distribution built from source. Empty when no build asked for a compiler
/// (another failure: the index cannot be reached, a version does not exist, ...).
fn needs_compiler(output: &str, from_source: &BTreeMap<String, Native>) -> Vec<Native> {
    // A stand-in ran, the compiler variables' `false` did, or a build tool found no compiler.
    const SIGNS: &[&str] = &[
        NO_COMPILER,
        "command 'false' failed",
        "unable to execute 'false'",
        "can't find Rust compiler",
    ];
    if !SIGNS.iter().any(|sign| output.contains(sign)) {
        return Vec::new();
    }
    let named = failed_builds(output);
    let mut needing: Vec<Native> = from_source
        .iter()
        .filter(|(name, _)| named.contains(*name))
        .map(|(_, native)| native.clone())
        .collect();
    if needing.is_empty() {
        // pip named what this install did not build from source knowingly (uv, or an old pip
        // without a report): name that; or it named nothing: every candidate.
        needing = named
            .iter()
            .map(|name| Native {
                name: name.clone(),
                version: String::new(),
                evidence: Vec::new(),
            })
            .collect();
    }
    if needing.is_empty() {
        needing = from_source.values().cloned().collect();
    }
    for native in &mut needing {
        native
            .evidence
            .push("building it from source needs a compiler (it has no pure-Python build)".into());
    }
    needing
}

/// The distributions (normalized names) pip's `output` says it failed to build: "Failed
/// building wheel for X", "Building wheel for X (pyproject.toml) did not run successfully",
/// "Could not build wheels for X, which ...", "Failed to build X Y", "... based projects (X,
/// Y)", and pip 25's "Failed to build installable wheels ..." followed by "╰─> X Y".
fn failed_builds(output: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let mut after_list_head = false;
    for line in output.lines() {
        let line = line.trim_start_matches([' ', '│', '×', '║']).trim();
        let line = line.strip_prefix("ERROR: ").unwrap_or(line);
        let mut words: Vec<&str> = Vec::new();
        for (phrase, all) in [
            ("Failed building wheel for ", false),
            ("Building wheel for ", false),
            ("Could not build wheels for ", false),
            ("Failed to build ", true),
        ] {
            let Some(at) = line.find(phrase) else {
                continue;
            };
            let rest = &line[at + phrase.len()..];
            if rest.starts_with("installable") {
                if let (Some(open), Some(close)) = (rest.find('('), rest.rfind(')'))
                    && open < close
                {
                    words.extend(rest[open + 1..close].split([',', ' ']));
                }
            } else {
                let mut split = rest.split([',', ' ']);
                if all {
                    words.extend(split);
                } else {
                    words.extend(split.next());
                }
            }
        }
        if after_list_head && let Some(rest) = line.strip_prefix("╰─>") {
            words.extend(rest.split([',', ' ']));
        }
        after_list_head = line.contains("Failed to build installable wheels");
        named.extend(
            words
                .into_iter()
                .map(|w| w.trim_matches(|c: char| !(c.is_alphanumeric() || "-_.".contains(c))))
                .filter(|w| !w.is_empty())
                .map(normalize),
        );
    }
    named
}

/// What the sandbox needs of the requirements, as `RESOLVE` prints it.
#[derive(Debug, Deserialize)]
struct Plan {
    /// Every distribution to install, pinned.
    install: Vec<Pick>,
    /// What the host's resolution includes and the sandbox does not need.
    skipped: Vec<Skipped>,
    /// Requirements the sandbox needs that the host's resolution does not satisfy.
    missing: Vec<String>,
    /// Distributions required that the sandbox has its own module for ([`PROVIDED`]).
    #[serde(default)]
    provided: Vec<Provided>,
    /// Distributions required that are built into the guest ([`bundled`]), each with the
    /// requirements on it (all allow the guest's version).
    #[serde(default)]
    bundled: Vec<bundled::Provided>,
    /// Requirements that do not allow the guest's version of a bundled distribution.
    #[serde(default)]
    conflicts: Vec<bundled::Conflict>,
    /// The requirements files' index and link options, for the install.
    options: Vec<String>,
}

/// One distribution to install.
#[derive(Debug, Deserialize)]
struct Pick {
    name: String,
    version: String,
    /// `name==version`, or `name @ URL` for one that came from a URL or a path.
    requirement: String,
    /// The file name of the wheel pip chose, if it chose a wheel.
    wheel: Option<String>,
    /// That wheel is for one platform (not `none-any`): it has native code.
    native_wheel: bool,
    /// From a URL or a path rather than an index: pip installs that file, `--no-binary` or not.
    direct: bool,
}

/// What to install, resolved for the sandbox; None where markers can only be evaluated for the
/// host (uv; a pip without `--report` or without its vendored `packaging`), as told to `note`.
/// `scratch` holds the constraints and takes pip's report.
fn plan(
    root: &Path,
    installer: &Installer,
    requirements: &Requirements,
    scratch: &Path,
    note: &mut dyn FnMut(Note),
) -> Result<Option<Plan>, PackagesError> {
    let Installer::Pip { python } = installer else {
        note(Note::HostMarkers(
            "uv evaluates environment markers for this machine, not for the sandbox (CPython 3.14 on WASI, which uv has no target for): a dependency required only on this machine's platform, such as SQLAlchemy 2.0's greenlet, is installed too, and refused if it has native code; `--installer pip` evaluates them for the sandbox"
                .into(),
        ));
        return Ok(None);
    };
    resolve(root, python, requirements, scratch, note)
}

/// One resolution: pip's report, read for the sandbox.
enum Round {
    Plan(Plan),
    /// pip found no resolution (or failed otherwise).
    Failed {
        command: String,
        status: String,
        output: String,
    },
    /// Markers can only be the host's, and why.
    HostMarkers(String),
}

/// Resolve with `pip install --dry-run --report` into `scratch`, held to the guest's bundled
/// distributions ([`CONSTRAINTS`]), and read the report for the sandbox with `RESOLVE`; again,
/// with them added, while the sandbox needs requirements the report does not satisfy. When
/// pip finds no resolution, [`diagnose`] says whether a requirement on a bundled distribution
/// is why.
fn resolve(
    root: &Path,
    python: &str,
    requirements: &Requirements,
    scratch: &Path,
    note: &mut dyn FnMut(Note),
) -> Result<Option<Plan>, PackagesError> {
    let constraints = scratch.join(CONSTRAINTS);
    let mut added: Vec<String> = Vec::new();
    for _ in 0..ROUNDS {
        let plan = match round(
            root,
            python,
            requirements,
            &added,
            Some(&constraints),
            scratch,
        )? {
            Round::Plan(plan) => plan,
            Round::HostMarkers(why) => {
                note(Note::HostMarkers(why));
                return Ok(None);
            }
            Round::Failed {
                command,
                status,
                output,
            } => {
                return Err(diagnose(
                    root,
                    python,
                    requirements,
                    &added,
                    scratch,
                    PackagesError::Installer {
                        command,
                        status,
                        output,
                    },
                ));
            }
        };
        if !plan.conflicts.is_empty() {
            return Err(PackagesError::Bundled(plan.conflicts));
        }
        if plan.missing.is_empty() {
            return Ok(Some(plan));
        }
        let fresh: Vec<String> = plan
            .missing
            .iter()
            .filter(|m| !added.contains(m))
            .cloned()
            .collect();
        if fresh.is_empty() {
            return Err(PackagesError::Resolve(format!(
                "pip's resolution does not satisfy {}, which the sandbox needs: add {} to the requirements",
                plan.missing.join(", "),
                if plan.missing.len() == 1 {
                    "it"
                } else {
                    "them"
                }
            )));
        }
        note(Note::Resolving(fresh.clone()));
        added.extend(fresh);
    }
    Err(PackagesError::Resolve(format!(
        "pip's resolution still lacks what the sandbox needs after {ROUNDS} rounds: add {} to the requirements",
        added.join(", ")
    )))
}

/// Why pip found no resolution held to the guest's versions: resolved again without that
/// hold, the requirements that do not allow a bundled distribution's version, by name and
/// whose (the project's, or a package's at the version pip then picks), if there are any;
/// else, when pip's own output names a bundled distribution, that; else `failed`, pip's error.
fn diagnose(
    root: &Path,
    python: &str,
    requirements: &Requirements,
    added: &[String],
    scratch: &Path,
    failed: PackagesError,
) -> PackagesError {
    if let Ok(Round::Plan(plan)) = round(root, python, requirements, added, None, scratch)
        && !plan.conflicts.is_empty()
    {
        return PackagesError::Bundled(plan.conflicts);
    }
    if let PackagesError::Installer { output, .. } = &failed
        && output.contains("(constraint)")
    {
        let names = bundled::named_in(output);
        if !names.is_empty() {
            return PackagesError::BundledUnresolvable {
                installer: "pip".into(),
                names,
                output: output.clone(),
            };
        }
    }
    failed
}

/// `pip install --dry-run --report` of the requirements (and `added`), with `constraints` if
/// given, read for the sandbox by `RESOLVE`.
fn round(
    root: &Path,
    python: &str,
    requirements: &Requirements,
    added: &[String],
    constraints: Option<&Path>,
    scratch: &Path,
) -> Result<Round, PackagesError> {
    let report = scratch.join("report.json");
    let _ = fs::remove_file(&report);
    let (files, lines) = match requirements {
        Requirements::File(path) => (vec![path.to_string_lossy().into_owned()], Vec::new()),
        Requirements::List(list) => (Vec::new(), list.clone()),
    };
    let mut command = Command::new(python);
    command
        .args([
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            "--report",
        ])
        .arg(&report)
        .args(requirements.args())
        .args(added)
        .current_dir(root);
    if let Some(constraints) = constraints {
        command.arg("-c").arg(constraints);
    }
    let shown = format!("{command:?}");
    let output = command
        .output()
        .map_err(|e| PackagesError::NoInstaller(format!("cannot run pip: {e}")))?;
    if !output.status.success() {
        let text = both(&output);
        if text.contains("no such option: --report") || text.contains("no such option: --dry-run") {
            return Ok(Round::HostMarkers(format!(
                "`{python} -m pip` has no `install --dry-run --report` (pip 22.2 and later have it): environment markers are evaluated for this machine, not for the sandbox; `{python} -m pip install --upgrade pip` makes them the sandbox's"
            )));
        }
        return Ok(Round::Failed {
            command: shown,
            status: output.status.to_string(),
            output: tail(&text, 40),
        });
    }
    let mut roots = lines;
    roots.extend(added.iter().cloned());
    let spec = serde_json::json!({
        "environment": sandbox_environment(),
        "provided": PROVIDED.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        "bundled": bundled::all().iter().map(|b| [&b.name, &b.version]).collect::<Vec<_>>(),
        "report": report.to_string_lossy(),
        "files": &files,
        "lines": roots,
    });
    // `-c` puts the working folder first on sys.path: the scratch folder, where nothing
    // shadows the standard library or pip.
    let output = Command::new(python)
        .arg("-c")
        .arg(RESOLVE)
        .arg(spec.to_string())
        .current_dir(scratch)
        .output()
        .map_err(|e| PackagesError::NoInstaller(format!("cannot run {python}: {e}")))?;
    if output.status.code() == Some(3) {
        return Ok(Round::HostMarkers(format!(
            "{}: environment markers are evaluated for this machine, not for the sandbox",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    if !output.status.success() {
        return Err(PackagesError::Resolve(format!(
            "evaluating pip's report for the sandbox failed ({}):\n{}",
            output.status,
            tail(&both(&output), 20)
        )));
    }
    let plan: Plan = serde_json::from_slice(&output.stdout).map_err(|e| {
        PackagesError::Resolve(format!("unreadable answer of the report's evaluation: {e}"))
    })?;
    Ok(Round::Plan(plan))
}

/// [`SANDBOX_MARKERS`] as a JSON object, for `RESOLVE`.
fn sandbox_environment() -> serde_json::Map<String, serde_json::Value> {
    SANDBOX_MARKERS
        .iter()
        .map(|(name, value)| (name.to_string(), serde_json::Value::from(*value)))
        .collect()
}

/// A command's stderr, then its stdout.
fn both(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stdout));
    text
}

/// The Python script, run by the Python that runs pip, that reads pip's installation report
/// for the sandbox: from the project's requirements (their markers and extras, read from the
/// requirements files or the pyproject list) it walks each resolved distribution's
/// `Requires-Dist`, evaluating every marker against the sandbox's values ([`SANDBOX_MARKERS`])
/// with the extras asked for, and prints as JSON what to install (pinned, with whether the
/// chosen wheel is for one platform), what the host resolved and the sandbox does not need
/// (with the markers that are false), what the sandbox needs and the report lacks, and the
/// requirements files' index options. Uses pip's vendored `packaging` only.
const RESOLVE: &str = r##"
# Reads pip's installation report for the sandbox. argv[1]: JSON {"environment": the sandbox's
# marker values, "report": the report's path, "files": requirements files, "lines": requirement
# strings, "provided": names the sandbox has its own module for, "bundled": [[name, version]]
# built into the guest}. Prints JSON {"install": [{"name", "version", "requirement", "wheel",
# "native_wheel", "direct"}], "skipped": [{"name", "version", "reasons": [{"by", "marker"}]}],
# "missing": [requirement], "options": [argument], "provided": [{"name", "version", "by"}],
# "bundled": [{"name", "version", "wanted": [{"by", "requirement"}]}], "conflicts": [{"name",
# "version", "requirement", "by", "by_version"}]}. Exits 3 without pip's vendored packaging.
import copy, json, os, re, shlex, sys, urllib.parse

try:
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    from pip._vendor.packaging.utils import canonicalize_name
except ImportError as e:
    print("this pip has no pip._vendor.packaging: %s" % e, file=sys.stderr)
    sys.exit(3)

spec = json.loads(sys.argv[1])
sandbox = spec["environment"]
with open(spec["report"], encoding="utf-8") as f:
    report = json.load(f)
host = dict(default_environment(), **(report.get("environment") or {}))

# Options of requirements files that apply to the whole install (indexes, links): the install
# of the resolved distributions needs them too.
GLOBAL = {
    "-i": "--index-url", "--index-url": "--index-url", "--extra-index-url": "--extra-index-url",
    "-f": "--find-links", "--find-links": "--find-links", "--trusted-host": "--trusted-host",
    "--only-binary": "--only-binary", "--no-binary": "--no-binary",
    "--no-index": "--no-index", "--pre": "--pre", "--prefer-binary": "--prefer-binary",
}
FLAGS = {"--no-index", "--pre", "--prefer-binary"}
NESTED = {"-r": "r", "--requirement": "r", "-c": "c", "--constraint": "c", "-e": "e", "--editable": "e"}
ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz", ".tar.xz", ".txz")
NAMED_URL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*@")

roots = []
options = []


def root(text):
    """A requirement line: a named requirement is kept for its marker and extras; a path or a
    URL without a name is installed as pip resolved it."""
    head = text.split(";")[0].strip()
    if not NAMED_URL.match(head) and (
        "/" in head or "\\" in head or head.startswith(".") or "://" in head
        or head.lower().endswith(ARCHIVES)
    ):
        return
    try:
        roots.append(Requirement(text))
    except InvalidRequirement:
        pass


def lines(text):
    """pip's logical lines: continuations joined, comments dropped, ${VAR} expanded."""
    comment = re.compile(r"(^|\s+)#.*$")
    joined, part = [], None
    for line in text.splitlines():
        if line.endswith("\\") and not comment.match(line):
            part = (part or "") + line.strip("\\")
            continue
        if part is not None:
            line = part + (" " + line if comment.match(line) else line)
        joined.append(line)
        part = None
    if part is not None:
        joined.append(part)
    for line in joined:
        line = comment.sub("", line).strip()
        line = re.sub(r"\$\{([A-Z0-9_]+)\}", lambda m: os.environ.get(m.group(1), m.group(0)), line)
        if line:
            yield line


def read(path, seen):
    """A requirements file: its requirements into `roots`, its index and link options into
    `options`, the files it includes (-r) too."""
    path = os.path.abspath(path)
    if path in seen:
        return
    seen.add(path)
    base = os.path.dirname(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for line in lines(text):
        args = []
        for token in line.split():
            if token.startswith("-"):
                break
            args.append(token)
        if args:
            root(" ".join(args))
            continue
        words = shlex.split(line)
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            name, eq, value = word.partition("=")
            if not eq and not word.startswith("--") and len(word) > 2:
                name, value, eq = word[:2], word[2:], "="
            wanted = GLOBAL.get(name) or NESTED.get(name)
            if wanted is None:
                continue
            if name in FLAGS:
                options.append(name)
                continue
            if not eq:
                if i >= len(words):
                    break
                value = words[i]
                i += 1
            kind = NESTED.get(name)
            if kind == "r":
                if "://" not in value:
                    read(os.path.join(base, value), seen)
            elif kind == "e":
                root(value)
            elif kind is None:
                if wanted == "--find-links" and "://" not in value:
                    near = os.path.join(base, value)
                    if os.path.exists(near):
                        value = near
                options.extend([wanted, value])


seen = set()
for path in spec["files"]:
    read(path, seen)
for text in spec["lines"]:
    root(text)

dists = {}
for item in report.get("install") or []:
    dists[canonicalize_name(item["metadata"]["name"])] = item


def holds(marker, environment, extras):
    """Whether `marker` is true in `environment` for a distribution wanted with `extras` (one
    that cannot be evaluated counts as true: installed, as pip would)."""
    if marker is None:
        return True
    for extra in sorted(extras) or [""]:
        for name in {extra, canonicalize_name(extra)} if extra else {""}:
            values = dict(environment)
            values["extra"] = name
            try:
                if marker.evaluate(values):
                    return True
            except Exception:
                return True
    return False


def unmarked(req):
    req = copy.copy(req)
    req.marker = None
    return str(req)


need = {}  # canonical name -> extras wanted in the sandbox
queue = []
why_not = {}  # canonical name -> [(needed by, marker)], requirements false in the sandbox
missing = []
PROVIDED = {canonicalize_name(name) for name in spec.get("provided") or ()}
provided = {}  # canonical name -> {"name", "version", "by"}: required, not installed


def provide(canon, name, by):
    """A requirement the sandbox's own module satisfies: recorded (once), not walked."""
    item = dists.get(canon)
    provided.setdefault(canon, {
        "name": item["metadata"]["name"] if item else name,
        "version": item["metadata"]["version"] if item else None,
        "by": by,
    })


BUNDLED = {canonicalize_name(name): (name, version) for name, version in spec.get("bundled") or ()}
bundled = {}  # canonical name -> {"name", "version", "wanted": [{"by", "requirement"}]}
conflicts = []  # requirements the guest's version of a bundled distribution does not satisfy


def bundle(canon, req, by):
    """A requirement on a distribution built into the guest: the guest's version must satisfy
    it (else it is a conflict); recorded, not installed, and what it requires is walked with
    its extras (`pydantic[email]` needs email-validator installed)."""
    name, version = BUNDLED[canon]
    text = unmarked(req)
    if req.url is not None or not satisfies(req, version):
        item = dists.get(canonicalize_name(by)) if by else None
        conflict = {
            "name": name, "version": version, "requirement": text, "by": by,
            "by_version": item["metadata"]["version"] if item else None,
        }
        if conflict not in conflicts:
            conflicts.append(conflict)
        return
    entry = bundled.setdefault(canon, {"name": name, "version": version, "wanted": []})
    wanted_by = {"by": by, "requirement": text}
    if wanted_by not in entry["wanted"]:
        entry["wanted"].append(wanted_by)
    if canon in dists:
        want(canon, req.extras)


def satisfies(req, version):
    try:
        return req.specifier.contains(version, prereleases=True)
    except Exception:
        return True


def want(canon, extras):
    have = need.get(canon)
    if have is not None and set(extras) <= have:
        return
    need[canon] = (have or set()) | set(extras)
    queue.append(canon)


def wanted(req, by=None):
    """A requirement the sandbox needs: installed as the host's pip resolved it, or missing
    from that resolution (its marker is false on the host, or it asks for another version);
    `by` is the distribution that requires it (None: the project)."""
    canon = canonicalize_name(req.name)
    if canon in BUNDLED:
        bundle(canon, req, by)
        return
    if canon in PROVIDED:
        provide(canon, req.name, by)
        return
    item = dists.get(canon)
    if item is None or (req.url is None and not satisfies(req, item["metadata"]["version"])):
        missing.append(unmarked(req))
        return
    want(canon, req.extras)


named = {}
for req in roots:
    named.setdefault(canonicalize_name(req.name), []).append(req)
for canon, reqs in named.items():
    live = [r for r in reqs if holds(r.marker, sandbox, ())]
    for req in live:
        wanted(req)
    if not live and canon in dists:
        why_not.setdefault(canon, []).extend((None, str(r.marker)) for r in reqs)
for canon, item in dists.items():
    if item.get("requested") and canon not in named:
        if canon in BUNDLED:
            bundle(canon, Requirement(item["metadata"]["name"]), None)
        elif canon in PROVIDED:
            provide(canon, item["metadata"]["name"], None)
        else:
            want(canon, item.get("requested_extras") or ())

while queue:
    canon = queue.pop()
    item = dists[canon]
    extras = need[canon]
    for text in item["metadata"].get("requires_dist") or ():
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if holds(req.marker, sandbox, extras):
            wanted(req, item["metadata"]["name"])
        elif canonicalize_name(req.name) in dists and holds(req.marker, host, extras):
            why_not.setdefault(canonicalize_name(req.name), []).append(
                (item["metadata"]["name"], str(req.marker))
            )


def wheel(item):
    url = (item.get("download_info") or {}).get("url") or ""
    file = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    return file if file.endswith(".whl") else None


def native(file):
    """Whether a wheel's file name says it is for one platform: an ABI or platform tag other
    than none-any."""
    parts = file[: -len(".whl")].split("-")
    return len(parts) >= 5 and (parts[-2] != "none" or parts[-1] != "any")


def requirement(item):
    """What installs exactly this distribution: name==version from an index, the URL it came
    from otherwise."""
    meta = item["metadata"]
    info = item.get("download_info") or {}
    if not item.get("is_direct") or not info.get("url"):
        return "%s==%s" % (meta["name"], meta["version"])
    url = info["url"]
    vcs = info.get("vcs_info")
    if vcs:
        url = "%s+%s@%s" % (vcs["vcs"], url, vcs.get("commit_id") or vcs.get("requested_revision") or "")
        url = url.rstrip("@")
    if info.get("subdirectory"):
        url += "#subdirectory=" + info["subdirectory"]
    return "%s @ %s" % (meta["name"], url)


install = []
for canon in sorted(set(need) - set(BUNDLED)):
    item = dists[canon]
    file = wheel(item)
    install.append({
        "name": item["metadata"]["name"],
        "version": item["metadata"]["version"],
        "requirement": requirement(item),
        "wheel": file,
        "native_wheel": bool(file and native(file)),
        "direct": bool(item.get("is_direct")),
    })
skipped = []
for canon in sorted(set(dists) - set(need) - set(provided) - set(bundled)):
    item = dists[canon]
    skipped.append({
        "name": item["metadata"]["name"],
        "version": item["metadata"]["version"],
        "reasons": [{"by": by, "marker": marker} for by, marker in why_not.get(canon, ())],
    })
json.dump(
    {
        "install": install, "skipped": skipped, "missing": sorted(set(missing)), "options": options,
        "provided": [provided[canon] for canon in sorted(provided)],
        "bundled": [
            dict(bundled[canon], wanted=sorted(
                bundled[canon]["wanted"], key=lambda w: (w["by"] is not None, w["by"] or "", w["requirement"])
            ))
            for canon in sorted(bundled)
        ],
        "conflicts": conflicts,
    },
    sys.stdout,
)
"##;

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
/// if it has any. For one built here from source (named in `built_here`, normalized, and not
/// installed from a wheel's URL) only its files count: its wheel is tagged for this platform
/// when it declares extension modules, even if none was compiled (SQLAlchemy's Cython
/// extensions, without a C compiler).
fn inspect(
    dir: &Path,
    built_here: &BTreeSet<String>,
) -> Result<Vec<(Dist, Option<Native>)>, PackagesError> {
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
        // The installer wrote these, from the distribution's own files: read them as any
        // file someone else controls. An absent one reads as empty.
        let read = |file: &str| -> Result<String, PackagesError> {
            match crate::regular_file::read(&info.join(file), crate::regular_file::MAX_SOURCE_BYTES)
            {
                Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                Err(crate::regular_file::FileError::NotFound(_)) => Ok(String::new()),
                Err(e) => Err(PackagesError::Read(e.to_string())),
            }
        };
        let metadata = read("METADATA")?;
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
        // pip records where a distribution installed from a URL or a path came from.
        let from_wheel = serde_json::from_str::<serde_json::Value>(&read("direct_url.json")?)
            .ok()
            .and_then(|v| v.get("url")?.as_str().map(|url| url.ends_with(".whl")))
            .unwrap_or(false);
        let mut evidence = Vec::new();
        if from_wheel || !built_here.contains(&normalize(&dist.name)) {
            for tag in read("WHEEL")?
                .lines()
                .filter_map(|l| l.strip_prefix("Tag:"))
            {
                let tag = tag.trim();
                if !tag.ends_with("-none-any") {
                    evidence.push(format!("wheel tag {tag} (not py3-none-any)"));
                }
            }
        }
        for line in read("RECORD")?.lines() {
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
        let found = inspect(dir.path(), &BTreeSet::new()).unwrap();
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

    #[test]
    fn a_wheel_built_here_is_judged_by_its_files() {
        // SQLAlchemy built from source without a C compiler: its wheel is tagged for this
        // platform (it declares Cython extensions), but none was compiled.
        let dir = tempfile::tempdir().unwrap();
        let info = dir.path().join("sqlalchemy-2.0.58.dist-info");
        fs::create_dir_all(&info).unwrap();
        fs::write(info.join("METADATA"), "Name: SQLAlchemy\nVersion: 2.0.58\n").unwrap();
        fs::write(info.join("WHEEL"), "Tag: cp311-cp311-linux_x86_64\n").unwrap();
        fs::write(
            info.join("RECORD"),
            "sqlalchemy/__init__.py,,\nsqlalchemy/cyextension/util.pyx,,\n",
        )
        .unwrap();
        let downloaded = inspect(dir.path(), &BTreeSet::new()).unwrap();
        assert!(downloaded[0].1.is_some());
        let built_here = inspect(dir.path(), &BTreeSet::from(["sqlalchemy".to_string()])).unwrap();
        assert!(built_here[0].1.is_none(), "{:?}", built_here[0].1);
        // Unless pip installed it from a wheel's URL, which `--no-binary` does not change.
        fs::write(
            info.join("direct_url.json"),
            r#"{"url": "file:///w/sqlalchemy-2.0.58-cp311-cp311-linux_x86_64.whl", "archive_info": {}}"#,
        )
        .unwrap();
        let from_url = inspect(dir.path(), &BTreeSet::from(["sqlalchemy".to_string()])).unwrap();
        assert!(from_url[0].1.is_some());
        fs::remove_file(info.join("direct_url.json")).unwrap();
        // A native file counts all the same.
        fs::write(
            info.join("RECORD"),
            "sqlalchemy/cyextension/util.cpython-311-x86_64-linux-gnu.so,,\n",
        )
        .unwrap();
        let built_here = inspect(dir.path(), &BTreeSet::from(["sqlalchemy".to_string()])).unwrap();
        assert!(built_here[0].1.is_some());
    }

    #[test]
    fn failed_builds_are_read_from_every_pip() {
        // pip 23.2
        let pip23 = "  error: subprocess-exited-with-error\n  \n  × Building wheel for needsrust (pyproject.toml) did not run successfully.\n  │ exit code: 1\n  ╰─> [61 lines of output]\n      filerouter: no compiler while installing for the sandbox (cargo)\n      [end of output]\n  ERROR: Failed building wheel for needsrust\nERROR: Could not build wheels for needsrust, which is required to install pyproject.toml-based projects\n";
        assert_eq!(
            failed_builds(pip23),
            BTreeSet::from(["needsrust".to_string()])
        );
        // pip 24
        let pip24 = "Failed to build bcrypt Other_Thing\nERROR: ERROR: Failed to build installable wheels for some pyproject.toml based projects (bcrypt, Other_Thing)\n";
        assert_eq!(
            failed_builds(pip24),
            BTreeSet::from(["bcrypt".to_string(), "other-thing".to_string()])
        );
        // pip 25
        let pip25 = "error: failed-wheel-build-for-install\n\n× Failed to build installable wheels for some pyproject.toml based projects\n╰─> orjson\n";
        assert_eq!(failed_builds(pip25), BTreeSet::from(["orjson".to_string()]));
        assert!(failed_builds("ERROR: No matching distribution found for nope==9").is_empty());
    }

    #[test]
    fn a_build_that_wanted_a_compiler_is_named() {
        let native = |name: &str, why: &str| Native {
            name: name.into(),
            version: "1.0".into(),
            evidence: vec![why.into()],
        };
        let from_source = BTreeMap::from([
            (
                "needsrust".to_string(),
                native("needsrust", "it has no wheel"),
            ),
            ("pure".to_string(), native("pure", "it has no wheel")),
        ]);
        let output = format!(
            "× Building wheel for needsrust (pyproject.toml) did not run successfully.\n{NO_COMPILER} (cargo)\nERROR: Failed building wheel for needsrust\n"
        );
        let named = needs_compiler(&output, &from_source);
        assert_eq!(named.len(), 1);
        assert_eq!(
            named[0].to_string(),
            "needsrust 1.0: it has no wheel, building it from source needs a compiler (it has no pure-Python build)"
        );
        // A failure that is not about compilers is left to the general error.
        assert!(needs_compiler("ERROR: No matching distribution found", &from_source).is_empty());
        // Nothing named: every candidate.
        assert_eq!(
            needs_compiler("can't find Rust compiler", &from_source).len(),
            2
        );
    }

    #[test]
    fn a_skipped_requirement_says_whose_and_which_marker() {
        let skipped = Skipped {
            name: "greenlet".into(),
            version: "3.5.6".into(),
            reasons: vec![SkipReason {
                by: Some("SQLAlchemy".into()),
                marker: r#"platform_machine == "x86_64""#.into(),
            }],
        };
        assert_eq!(
            Note::Skipped(skipped).to_string(),
            r#"greenlet 3.5.6 (SQLAlchemy's dependency): skipped, its marker `platform_machine == "x86_64"` is false in the sandbox"#
        );
    }

    /// A pip report as `pip install --dry-run --report` writes it on x86_64 Linux with CPython
    /// 3.11, for SQLAlchemy 2.0 (greenlet where `platform_machine` is x86_64, ...) and WebOb
    /// (legacy-cgi from Python 3.13 on, which the host's 3.11 left out).
    fn host_report() -> serde_json::Value {
        let dist = |name: &str, version: &str, wheel: &str, requested: bool, requires: &[&str]| {
            serde_json::json!({
                "metadata": {"name": name, "version": version, "requires_dist": requires},
                "download_info": {
                    "url": format!("https://files.example/packages/{wheel}"),
                    "archive_info": {},
                },
                "is_direct": false,
                "requested": requested,
            })
        };
        serde_json::json!({
            "version": "1",
            "environment": {
                "implementation_name": "cpython", "implementation_version": "3.11.7",
                "os_name": "posix", "platform_machine": "x86_64",
                "platform_python_implementation": "CPython", "platform_release": "6.1",
                "platform_system": "Linux", "platform_version": "#1",
                "python_full_version": "3.11.7", "python_version": "3.11", "sys_platform": "linux",
            },
            "install": [
                dist(
                    "SQLAlchemy",
                    "2.0.58",
                    "sqlalchemy-2.0.58-cp311-cp311-manylinux_2_17_x86_64.whl",
                    true,
                    &[
                        r#"importlib-metadata; python_version < "3.8""#,
                        r#"greenlet>=1; platform_machine == "aarch64" or (platform_machine == "ppc64le" or (platform_machine == "x86_64" or (platform_machine == "amd64" or (platform_machine == "AMD64" or (platform_machine == "win32" or platform_machine == "WIN32")))))"#,
                        "typing-extensions>=4.6.0",
                        r#"greenlet>=1; extra == "asyncio""#,
                    ],
                ),
                dist("greenlet", "3.5.6", "greenlet-3.5.6-cp311-cp311-manylinux_2_24_x86_64.whl", false, &[]),
                dist("typing_extensions", "4.16.0", "typing_extensions-4.16.0-py3-none-any.whl", false, &[]),
                dist(
                    "WebOb",
                    "1.8.11",
                    "webob-1.8.11-py2.py3-none-any.whl",
                    true,
                    &[r#"legacy-cgi>=2.6; python_version >= "3.13""#],
                ),
            ],
        })
    }

    /// Whether this machine has a python3 with pip (the resolver's tests need one); if not,
    /// says loudly that `test` is skipped.
    fn host_pip(test: &str) -> bool {
        let pip = Command::new("python3")
            .args(["-c", "import pip._vendor.packaging"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !pip {
            eprintln!("\n!!!!!!!!\nSKIPPED: {test}: no python3 with pip\n!!!!!!!!\n");
        }
        pip
    }

    #[test]
    fn the_sandboxs_own_modules_satisfy_their_requirements() {
        if !host_pip("the_sandboxs_own_modules_satisfy_their_requirements") {
            return;
        }
        let dist = |name: &str, version: &str, wheel: &str, requested: bool, requires: &[&str]| {
            serde_json::json!({
                "metadata": {"name": name, "version": version, "requires_dist": requires},
                "download_info": {"url": format!("https://files.example/{wheel}"), "archive_info": {}},
                "is_direct": false,
                "requested": requested,
            })
        };
        let report = serde_json::json!({
            "version": "1",
            "install": [
                dist("passlib", "1.7.4", "passlib-1.7.4-py2.py3-none-any.whl", true,
                    &[r#"bcrypt>=3.1.0; extra == "bcrypt""#, r#"argon2-cffi>=18.2.0; extra == "argon2""#]),
                dist("bcrypt", "5.0.0", "bcrypt-5.0.0-cp39-abi3-manylinux_2_34_x86_64.whl", false, &[]),
                dist("argon2-cffi", "25.1.0", "argon2_cffi-25.1.0-py3-none-any.whl", true, &["argon2-cffi-bindings"]),
                dist("argon2-cffi-bindings", "26.2.0", "argon2_cffi_bindings-26.2.0-cp39-abi3-manylinux_2_17_x86_64.whl", false, &["cffi>=1.0.1"]),
                dist("cffi", "2.1.1", "cffi-2.1.1-cp311-cp311-manylinux_2_17_x86_64.whl", false, &[]),
            ],
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        fs::write(&path, report.to_string()).unwrap();
        let spec = serde_json::json!({
            "environment": sandbox_environment(),
            "report": path.to_string_lossy(),
            "files": [],
            "lines": ["passlib[bcrypt]==1.7.4", "argon2-cffi"],
            "provided": PROVIDED.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        });
        let output = Command::new("python3")
            .arg("-c")
            .arg(RESOLVE)
            .arg(spec.to_string())
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", both(&output));
        let plan: Plan = serde_json::from_slice(&output.stdout).unwrap();
        let install: Vec<&str> = plan
            .install
            .iter()
            .map(|p| p.requirement.as_str())
            .collect();
        assert_eq!(install, ["passlib==1.7.4"]);
        let provided: Vec<String> = plan
            .provided
            .iter()
            .map(|p| Note::Provided(p.clone()).to_string())
            .collect();
        assert_eq!(provided.len(), 2, "{provided:?}");
        assert!(
            provided[0].starts_with("argon2-cffi 25.1.0 (the project's requirement): not installed, the sandbox has its own `argon2` module"),
            "{provided:?}"
        );
        assert!(
            provided[1].starts_with("bcrypt 5.0.0 (passlib's dependency): not installed, the sandbox has its own `bcrypt` module"),
            "{provided:?}"
        );
        // What only the provided ones require is left out too.
        let skipped: Vec<&str> = plan.skipped.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(skipped, ["argon2-cffi-bindings", "cffi"]);
        assert!(plan.missing.is_empty());
    }

    #[test]
    fn the_guests_bundled_distributions_are_provided_at_its_versions() {
        if !host_pip("the_guests_bundled_distributions_are_provided_at_its_versions") {
            return;
        }
        let dist = |name: &str, version: &str, wheel: &str, requested: bool, requires: &[&str]| {
            serde_json::json!({
                "metadata": {"name": name, "version": version, "requires_dist": requires},
                "download_info": {"url": format!("https://files.example/{wheel}"), "archive_info": {}},
                "is_direct": false,
                "requested": requested,
            })
        };
        let report = |sqlmodel_pydantic: &str| {
            serde_json::json!({
                "version": "1",
                "install": [
                    dist("pydantic", "2.14.4", "pydantic-2.14.4-py3-none-any.whl", true,
                        &["pydantic-core==2.50.5", "typing-extensions>=4.16.0", r#"email-validator>=2.0.0; extra == "email""#]),
                    dist("pydantic_core", "2.50.5", "pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_x86_64.whl", false,
                        &["typing-extensions>=4.16.0"]),
                    dist("typing_extensions", "4.16.0", "typing_extensions-4.16.0-py3-none-any.whl", false, &[]),
                    dist("email-validator", "2.4.0", "email_validator-2.4.0-py3-none-any.whl", false, &[]),
                    dist("sqlmodel", "0.0.50", "sqlmodel-0.0.50-py3-none-any.whl", true,
                        &[sqlmodel_pydantic, "typing-extensions>=4.5.0"]),
                ],
            })
        };
        let evaluate = |report: serde_json::Value, lines: &[&str]| -> Plan {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("report.json");
            fs::write(&path, report.to_string()).unwrap();
            let spec = serde_json::json!({
                "environment": sandbox_environment(),
                "report": path.to_string_lossy(),
                "files": [],
                "lines": lines,
                "provided": PROVIDED.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
                "bundled": [["pydantic", "2.14.4"], ["pydantic-core", "2.50.5"], ["typing-extensions", "4.16.0"]],
            });
            let output = Command::new("python3")
                .arg("-c")
                .arg(RESOLVE)
                .arg(spec.to_string())
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", both(&output));
            serde_json::from_slice(&output.stdout).unwrap()
        };
        let plan = evaluate(
            report("pydantic>=2.11.0"),
            &["pydantic[email]>=2.7", "sqlmodel"],
        );
        let install: Vec<&str> = plan
            .install
            .iter()
            .map(|p| p.requirement.as_str())
            .collect();
        // The extra of the provided pydantic is installed; nothing bundled is.
        assert_eq!(install, ["email-validator==2.4.0", "sqlmodel==0.0.50"]);
        assert!(plan.conflicts.is_empty(), "{:?}", plan.conflicts);
        assert!(plan.skipped.is_empty(), "{:?}", plan.skipped);
        let notes: Vec<String> = plan.bundled.iter().map(ToString::to_string).collect();
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].starts_with("pydantic 2.14.4: provided by the sandbox (its pydantic-core ")
                && notes[0].ends_with(
                    "not installed; `pydantic[email]>=2.7` (the project's), `pydantic>=2.11.0` (sqlmodel's) allow it"
                ),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with(
                "pydantic-core 2.50.5: provided by the sandbox (compiled for the sandbox"
            ) && notes[1].ends_with("`pydantic-core==2.50.5` (pydantic's) allows it"),
            "{notes:?}"
        );
        assert!(
            notes[2].starts_with("typing-extensions 4.16.0: provided"),
            "{notes:?}"
        );

        // A package's requirement, and the project's, that the guest's versions do not meet.
        let plan = evaluate(
            report("pydantic<2.0.0,>=1.8.2"),
            &["pydantic==2.10.0", "sqlmodel"],
        );
        let conflicts: Vec<String> = plan.conflicts.iter().map(ToString::to_string).collect();
        assert_eq!(conflicts.len(), 2, "{conflicts:?}");
        assert!(
            conflicts[0].starts_with("`pydantic==2.10.0` (the project's requirement) does not allow pydantic 2.14.4, the sandbox's: change it"),
            "{conflicts:?}"
        );
        assert!(
            conflicts[1].starts_with("sqlmodel 0.0.50 requires `pydantic<2.0.0,>=1.8.2`, which does not allow pydantic 2.14.4"),
            "{conflicts:?}"
        );
    }

    #[test]
    fn markers_are_evaluated_for_the_sandbox() {
        if !host_pip("markers_are_evaluated_for_the_sandbox") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.json");
        fs::write(&report, host_report().to_string()).unwrap();
        let spec = serde_json::json!({
            "environment": sandbox_environment(),
            "report": report.to_string_lossy(),
            "files": [],
            "lines": ["SQLAlchemy==2.0.58", "WebOb", "typing_extensions; python_version < '3.12'"],
        });
        let output = Command::new("python3")
            .arg("-c")
            .arg(RESOLVE)
            .arg(spec.to_string())
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", both(&output));
        let plan: Plan = serde_json::from_slice(&output.stdout).unwrap();
        let install: Vec<(&str, bool)> = plan
            .install
            .iter()
            .map(|p| (p.requirement.as_str(), p.native_wheel))
            .collect();
        // typing_extensions: the project's own requirement on it is false in the sandbox, and
        // SQLAlchemy's is true.
        assert_eq!(
            install,
            [
                ("SQLAlchemy==2.0.58", true),
                ("typing_extensions==4.16.0", false),
                ("WebOb==1.8.11", false),
            ]
        );
        assert_eq!(plan.skipped.len(), 1, "{:?}", plan.skipped);
        let greenlet = Note::Skipped(plan.skipped[0].clone()).to_string();
        assert!(
            greenlet.starts_with(
                r#"greenlet 3.5.6 (SQLAlchemy's dependency): skipped, its marker `platform_machine == "aarch64" or"#
            ),
            "{greenlet}"
        );
        assert_eq!(plan.missing, ["legacy-cgi>=2.6"]);
        assert!(plan.options.is_empty());
    }
}
