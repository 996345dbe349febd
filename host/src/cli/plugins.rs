//! `filerouter plugins stubs`: `.pyi` stubs for `filerouter.plugins.*`, from each plugin's WIT.
//!
//! Reads `config.py` (in the sandbox) for the declared plugins and parses each one's `wit/`
//! folder; no component is compiled. Writes `typings/filerouter/plugins/NAME.pyi` (Pyright's
//! default stub folder; point mypy's `mypy_path` at it) beside the `filerouter.plugins` stub they
//! import; `filerouter` itself comes from the typed package (docs/guides/testing.md, type checking).

use std::path::Path;

use anyhow::{Context, bail};

use super::PluginsCommand;
use crate::plugins::{Source, contract::Wit, stubs};

pub fn run(command: PluginsCommand) -> anyhow::Result<()> {
    match command {
        PluginsCommand::Stubs { project, out } => write_stubs(&project, out.as_deref()),
    }
}

fn write_stubs(project: &Path, out: Option<&Path>) -> anyhow::Result<()> {
    let root = project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", project.display()))?;
    let settings = super::project_command::load_settings(&root)?.unwrap_or_default();
    if settings.plugins.is_empty() {
        bail!(
            "config.py declares no plugins: nothing to write (plugins = {{\"NAME\": {{\"component\": \"plugins/NAME/NAME.wasm\"}}}})"
        );
    }
    let base = out.map_or_else(|| root.join("typings"), |o| root.join(o));
    let package = base.join("filerouter").join("plugins");
    std::fs::create_dir_all(&package)
        .with_context(|| format!("cannot create {}", package.display()))?;
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    // `filerouter` itself is the typed package (docs/guides/testing.md, type checking); a stub of it written by
    // an earlier version would hide it.
    let old_root = base.join("filerouter").join("__init__.pyi");
    if std::fs::read_to_string(&old_root).is_ok_and(|text| text.starts_with(stubs::OLD_ROOT_HEADER))
    {
        std::fs::remove_file(&old_root)
            .with_context(|| format!("cannot remove {}", old_root.display()))?;
    }
    write(&package.join("__init__.pyi"), stubs::PACKAGE)?;
    for (name, entry) in &settings.plugins {
        let source = Source::read(&root, name, entry)?;
        let wit = Wit::parse(name, &root, &source.wit_dir)?;
        let path = package.join(format!("{name}.pyi"));
        write(&path, &stubs::module(&wit))?;
        println!(
            "wrote {}",
            path.strip_prefix(&root).unwrap_or(&path).display()
        );
    }
    Ok(())
}
