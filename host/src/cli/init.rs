//! `filerouter init NAME`: create a project from the template in `cli/template/`.

use std::{fs, path::Path};

use anyhow::{Context, bail};

const FILES: &[(&str, &str)] = &[
    ("routes/index.py", include_str!("template/index.py")),
    ("config.py", include_str!("template/config.py")),
    (".gitignore", include_str!("template/gitignore")),
    ("public/.gitkeep", ""),
];

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
    println!("Created {}. Next:", name.display());
    println!("  cd {} && filerouter dev", name.display());
    Ok(())
}
