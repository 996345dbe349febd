//! `filerouter packages install`: the project's pure-Python dependencies, installed for the
//! sandbox into `.packages/` (see [`crate::packages`]).

use anyhow::Context;

use super::PackagesCommand;
use crate::packages::{self, Installer};

pub fn run(command: PackagesCommand) -> anyhow::Result<()> {
    match command {
        PackagesCommand::Install(args) => {
            let root = args
                .project
                .canonicalize()
                .with_context(|| format!("project folder {} not found", args.project.display()))?;
            let installer = Installer::pick(args.installer.as_deref(), args.python.as_deref())?;
            // What is left out for the sandbox, or built from source, is said before the
            // install starts (building from source can take a while).
            // The installer's own cache, inside filerouter's cache folder (see `packages`).
            let cache = crate::sandbox::artifacts::cache_dir().join("installers");
            let dists =
                packages::install(&root, &installer, &cache, &mut |note| eprintln!("{note}"))?;
            println!(
                "installed {} package{} into {}:",
                dists.len(),
                if dists.len() == 1 { "" } else { "s" },
                root.join(packages::DIR).display()
            );
            for dist in &dists {
                println!(
                    "  {} {}{}",
                    dist.name,
                    dist.version,
                    if dist.built_pure {
                        " (pure Python: built from source without its optional C extension)"
                    } else {
                        ""
                    }
                );
            }
            println!(
                "`filerouter dev` imports them from there; `filerouter build` bakes them into the cache."
            );
            Ok(())
        }
    }
}
