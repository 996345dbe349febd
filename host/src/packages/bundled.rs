//! The distributions built into the guest (pydantic 2 and what it imports,
//! `host/guest-packages.txt`), as `packages install` treats them: the sandbox provides them, so
//! the project's resolution is held to exactly the guest's versions (a constraints file for pip
//! and uv), a requirement that allows another version is refused by name, and none of them is
//! ever installed into `.packages/`. Routes import the guest's copies whatever `.packages/`
//! holds (they are in the snapshot's `sys.modules`), so one installed there would only shadow
//! their metadata, or, for pydantic-core, be refused as native code.
//!
//! Not for: building them into the guest (`guest-python/build/bundled.rs`), or resolving (`super`).

use std::{fmt, fs, path::Path};

use serde::Deserialize;

use super::{PackagesError, normalize, remove};

/// One bundled distribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundled {
    /// As `host/guest-packages.txt` names it (`pydantic-core`).
    pub name: String,
    pub version: String,
}

/// The bundled distributions, as the guest's build read them from `host/guest-packages.txt`
/// when the guest in this binary was built.
pub fn all() -> Vec<Bundled> {
    parse(env!("FILEROUTER_GUEST_PACKAGES"))
}

/// `name==version` words, separated by white space.
fn parse(text: &str) -> Vec<Bundled> {
    text.split_whitespace()
        .filter_map(|word| {
            let (name, version) = word.split_once("==")?;
            Some(Bundled {
                name: name.to_string(),
                version: version.to_string(),
            })
        })
        .collect()
}

/// The version of the bundled distribution `name` (any spelling), if it is one.
pub fn version_of(name: &str) -> Option<String> {
    let name = normalize(name);
    all()
        .into_iter()
        .find(|b| normalize(&b.name) == name)
        .map(|b| b.version)
}

/// The constraints file's text: every bundled distribution pinned to the guest's version, one
/// a line, for pip's and uv's `-c`.
pub fn constraints() -> String {
    all()
        .iter()
        .map(|b| format!("{}=={}\n", b.name, b.version))
        .collect()
}

/// Why the sandbox provides `name`, for the notes and errors.
fn provided_how(name: &str) -> String {
    match normalize(name).as_str() {
        "pydantic" => match version_of("pydantic-core") {
            Some(core) => format!("its pydantic-core {core} is compiled into the guest"),
            None => "built into the guest".to_string(),
        },
        "pydantic-core" => {
            "compiled for the sandbox from its source and linked into the guest".into()
        }
        _ => {
            "built into the guest with pydantic: routes import its copy, whatever .packages/ holds"
                .into()
        }
    }
}

/// A requirement on a bundled distribution, and whose it is.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Wanted {
    /// The distribution that has the requirement; None for the project's own.
    pub by: Option<String>,
    /// The requirement without its marker (`pydantic>=2.7`).
    pub requirement: String,
}

/// A bundled distribution the requirements need: the sandbox's is used, nothing is installed.
#[derive(Debug, Clone, Deserialize)]
pub struct Provided {
    pub name: String,
    /// The guest's version.
    pub version: String,
    /// The requirements on it (each allows the guest's version); empty when the installer did
    /// not say (uv, or a pip without a report, when it is removed after the install).
    #[serde(default)]
    pub wanted: Vec<Wanted>,
}

impl fmt::Display for Provided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: provided by the sandbox ({}), not installed",
            self.name,
            self.version,
            provided_how(&self.name)
        )?;
        if !self.wanted.is_empty() {
            let each: Vec<String> = self
                .wanted
                .iter()
                .map(|w| match &w.by {
                    Some(by) => format!("`{}` ({by}'s)", w.requirement),
                    None => format!("`{}` (the project's)", w.requirement),
                })
                .collect();
            write!(
                f,
                "; {} {} it",
                each.join(", "),
                if each.len() == 1 { "allows" } else { "allow" }
            )?;
        }
        Ok(())
    }
}

/// A requirement that does not allow the guest's version of a bundled distribution.
#[derive(Debug, Clone, Deserialize)]
pub struct Conflict {
    /// The bundled distribution, as pinned.
    pub name: String,
    /// The guest's version.
    pub version: String,
    /// The requirement without its marker (`pydantic==2.10.0`).
    pub requirement: String,
    /// The distribution that has it, and its version; None for the project's own requirement.
    pub by: Option<String>,
    pub by_version: Option<String>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.by {
            None => write!(
                f,
                "`{}` (the project's requirement) does not allow {} {}, the sandbox's: change it to allow {} (`{}>={}`, or `{}` alone)",
                self.requirement,
                self.name,
                self.version,
                self.version,
                self.name,
                self.version,
                self.name
            ),
            Some(by) => write!(
                f,
                "{by}{} requires `{}`, which does not allow {} {}, the sandbox's: use a release of {by} that works with {} {} (leave its version open, `{by}`, and the newest such release is chosen)",
                self.by_version
                    .as_ref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default(),
                self.requirement,
                self.name,
                self.version,
                self.name,
                self.version
            ),
        }
    }
}

/// What the sandbox has built in, for an error: `pydantic 2.14.4 (its pydantic-core 2.50.5 is
/// compiled into the guest)`, for each of `names`.
pub fn described<S: AsRef<str>>(names: &[S]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for name in names {
        let name = normalize(name.as_ref());
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
    all()
        .into_iter()
        .filter(|b| seen.contains(&normalize(&b.name)))
        .map(|b| format!("{} {} ({})", b.name, b.version, provided_how(&b.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether an installer's `output` names a bundled distribution (its resolution failed on one,
/// then, since it was held to the guest's versions).
pub fn named_in(output: &str) -> Vec<String> {
    let lower = output.to_ascii_lowercase();
    all()
        .into_iter()
        .filter(|b| {
            let dash = b.name.to_ascii_lowercase();
            let underscore = dash.replace('-', "_");
            [dash, underscore].iter().any(|n| {
                lower.match_indices(n.as_str()).any(|(at, _)| {
                    // A whole name: `pydantic` does not count inside `pydantic-settings`.
                    let before = lower[..at].chars().next_back();
                    let after = lower[at + n.len()..].chars().next();
                    let part = |c: Option<char>| {
                        c.is_some_and(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    };
                    !part(before) && !(part(after) && after != Some('.'))
                })
            })
        })
        .map(|b| b.name)
        .collect()
}

/// Removes every bundled distribution an installer put into `dir` (uv, or a pip without a
/// report, installs what the requirements need, the bundled ones included): the files its
/// `RECORD` lists inside `dir`, its `.dist-info`, and the folders that leaves empty. Returns
/// them, with the guest's version.
pub fn strip(dir: &Path) -> Result<Vec<Provided>, PackagesError> {
    let bundled = all();
    let mut stripped = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(stripped);
    };
    for entry in entries.flatten() {
        let folder = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = folder.strip_suffix(".dist-info") else {
            continue;
        };
        let name = stem.split('-').next().unwrap_or_default();
        let Some(found) = bundled
            .iter()
            .find(|b| normalize(&b.name) == normalize(name))
        else {
            continue;
        };
        let info = entry.path();
        let record = match crate::regular_file::read(
            &info.join("RECORD"),
            crate::regular_file::MAX_SOURCE_BYTES,
        ) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(crate::regular_file::FileError::NotFound(_)) => String::new(),
            Err(e) => return Err(PackagesError::Read(e.to_string())),
        };
        let mut parents = Vec::new();
        for line in record.lines() {
            let rel = line.split(',').next().unwrap_or_default();
            // Only plain paths inside `dir` (a script's `../../bin/x` is not ours to remove).
            let inside = !rel.is_empty()
                && !rel.starts_with('/')
                && rel
                    .split('/')
                    .all(|part| !part.is_empty() && part != ".." && part != ".");
            if !inside {
                continue;
            }
            let path = dir.join(rel);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(PackagesError::Io(path.display().to_string(), e)),
            }
            let mut parent = Path::new(rel).parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                parents.push(dir.join(p));
                parent = p.parent();
            }
        }
        remove(&info)?;
        // Deepest first: a folder is removed once nothing is left in it (`__pycache__` too).
        parents.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        parents.dedup();
        for folder in parents {
            remove(&folder.join("__pycache__"))?;
            let _ = fs::remove_dir(&folder);
        }
        stripped.push(Provided {
            name: found.name.clone(),
            version: found.version.clone(),
            wanted: Vec::new(),
        });
    }
    stripped.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(stripped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guests_pins_are_read() {
        let all = all();
        let names: Vec<&str> = all.iter().map(|b| b.name.as_str()).collect();
        assert!(names.contains(&"pydantic"), "{names:?}");
        assert!(names.contains(&"pydantic-core"), "{names:?}");
        assert_eq!(
            version_of("pydantic").as_deref(),
            Some(env!("FILEROUTER_PYDANTIC_VERSION"))
        );
        assert_eq!(
            version_of("Pydantic_Core").as_deref(),
            Some(env!("FILEROUTER_PYDANTIC_CORE_VERSION"))
        );
        assert!(constraints().contains(&format!(
            "pydantic=={}\n",
            env!("FILEROUTER_PYDANTIC_VERSION")
        )));
        assert_eq!(
            parse("a==1  b-c==2.0\n"),
            [
                Bundled {
                    name: "a".into(),
                    version: "1".into()
                },
                Bundled {
                    name: "b-c".into(),
                    version: "2.0".into()
                }
            ]
        );
    }

    #[test]
    fn names_are_found_whole() {
        assert_eq!(
            named_in("Because you require pydantic==2.10.0 and pydantic==2.14.4"),
            ["pydantic"]
        );
        assert!(named_in("pydantic-settings 2.16.3 needs python-dotenv").is_empty());
        assert_eq!(
            named_in("The user requested (constraint) pydantic_core==2.50.5"),
            ["pydantic-core"]
        );
    }

    #[test]
    fn an_installed_bundled_distribution_is_removed_by_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let version = version_of("pydantic").unwrap();
        let info = dir.path().join(format!("pydantic-{version}.dist-info"));
        fs::create_dir_all(&info).unwrap();
        fs::create_dir_all(dir.path().join("pydantic/v1/__pycache__")).unwrap();
        fs::create_dir_all(dir.path().join("jinja2")).unwrap();
        for file in [
            "pydantic/__init__.py",
            "pydantic/v1/__init__.py",
            "pydantic/v1/__pycache__/x.pyc",
            "jinja2/__init__.py",
        ] {
            fs::write(dir.path().join(file), "").unwrap();
        }
        fs::write(
            info.join("RECORD"),
            format!(
                "pydantic/__init__.py,sha256=x,1\npydantic/v1/__init__.py,,\n../../bin/evil,,\n/etc/passwd,,\npydantic-{version}.dist-info/RECORD,,\n"
            ),
        )
        .unwrap();
        let stripped = strip(dir.path()).unwrap();
        assert_eq!(stripped.len(), 1);
        assert_eq!(
            stripped[0].to_string(),
            format!(
                "pydantic {version}: provided by the sandbox (its pydantic-core {} is compiled into the guest), not installed",
                env!("FILEROUTER_PYDANTIC_CORE_VERSION")
            )
        );
        assert!(!dir.path().join("pydantic").exists());
        assert!(!info.exists());
        assert!(dir.path().join("jinja2/__init__.py").exists());
    }
}
