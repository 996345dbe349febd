//! `filerouter init NAME`: create a project from the template in `cli/template/`, with a test
//! (`tests/test_routes.py`, filerouter's TestClient) and a `pyproject.toml` that `pytest` runs.

use std::{fs, path::Path};

use anyhow::{Context, bail};

const FILES: &[(&str, &str)] = &[
    ("routes/index.py", include_str!("template/index.py")),
    ("config.py", include_str!("template/config.py")),
    (".gitignore", include_str!("template/gitignore")),
    ("public/.gitkeep", ""),
    (
        "tests/test_routes.py",
        include_str!("template/test_routes.py"),
    ),
];

/// `pyproject.toml`, with the project's name in it.
const PYPROJECT: &str = include_str!("template/pyproject.toml");

pub fn run(name: &Path) -> anyhow::Result<()> {
    if name.as_os_str().is_empty() {
        bail!("the project name is empty");
    }
    if name.exists() {
        let empty = name.is_dir()
            && fs::read_dir(name)
                .with_context(|| format!("cannot read {}", name.display()))?
                .next()
                .is_none();
        if !empty {
            bail!(
                "{} already exists and is not empty; nothing was changed",
                name.display()
            );
        }
    }
    for (rel, content) in FILES {
        let path = name.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        fs::write(&path, content).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let pyproject = name.join("pyproject.toml");
    let text = PYPROJECT.replace("{name}", &distribution_name(name));
    fs::write(&pyproject, text).with_context(|| format!("cannot write {}", pyproject.display()))?;
    println!("Created {}. Next:", name.display());
    println!("  cd {} && filerouter dev", name.display());
    println!("  pytest                      # tests/test_routes.py, with filerouter's TestClient");
    Ok(())
}

/// The folder's name as a Python distribution name (PEP 508: letters, digits, `-`, `_`, `.`;
/// starting and ending with a letter or digit), for `pyproject.toml`.
fn distribution_name(folder: &Path) -> String {
    let base = folder
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| folder.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let cleaned: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "filerouter-app".to_string()
    } else {
        trimmed.to_string()
    }
}
