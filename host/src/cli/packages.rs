//! `filerouter packages install`: the project's pure-Python dependencies, installed for the
//! sandbox into `.packages/` (see [`crate::packages`]), then compiled to bytecode there by the
//! guest ([`Sandbox::compile_packages`]).

use anyhow::Context;

use super::PackagesCommand;
use crate::{
    packages::{self, Installer},
    sandbox::{Sandbox, engine::SandboxEngine},
    scheduler::Scheduler,
};

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
            // Compiled once now, in the sandbox, so that no later start compiles them again.
            let started = std::time::Instant::now();
            match super::runtime()?.block_on(compile(root.join(packages::DIR))) {
                Ok(modules) => println!(
                    "compiled their {modules} modules for the sandbox in {:.1} s",
                    started.elapsed().as_secs_f64()
                ),
                Err(why) => eprintln!(
                    "warning: the packages were not compiled to bytecode ({why:#}); every start \
                     compiles what it imports of them instead"
                ),
            }
            println!(
                "`filerouter dev` imports them from there; `filerouter build` bakes them into the cache."
            );
            Ok(())
        }
    }
}

/// Compile every module of `dir` (the project's `.packages/`) to bytecode beside it, in the
/// built-in guest (see [`Sandbox::compile_packages`]): how many modules compiled.
async fn compile(dir: std::path::PathBuf) -> anyhow::Result<u32> {
    let scheduler = Scheduler::new(1);
    let engine = tokio::task::spawn_blocking(|| SandboxEngine::load(1))
        .await
        .context("engine setup panicked")??;
    let sandbox = Sandbox::new(engine, None, Default::default(), scheduler.tooling())?;
    Ok(sandbox.compile_packages(dir).await?)
}
