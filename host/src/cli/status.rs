//! `filerouter status`: whether a build cache exists, when it was made, what it holds.

use super::CacheArgs;
use crate::{
    cache,
    cli::build::{self, megabytes},
};

pub fn run(args: CacheArgs) -> anyhow::Result<()> {
    let dir = super::cache_dir(&args.project, args.cache_dir.as_deref())?;
    let Some(manifest) = cache::manifest(&dir) else {
        println!("no build in {} (run `filerouter build`)", dir.display());
        return Ok(());
    };
    let raw: u64 = manifest.sections.iter().map(|s| s.raw).sum();
    println!("build:       {}", dir.display());
    println!("created:     {}", manifest.created_at);
    println!("filerouter:  {}", manifest.filerouter_version);
    // As /docs counts them: routes (one per route file), handlers (one per path and method).
    println!(
        "routes:      {} files, {} handlers ({} static, {} dynamic)",
        manifest.routes.files,
        manifest.routes.handlers,
        manifest.routes.static_routes,
        manifest.routes.dynamic_routes
    );
    if !manifest.plugins.is_empty() {
        println!("plugins:     {}", manifest.plugins.join(", "));
    }
    println!(
        "size:        {} on disk ({} before compression, zstd level {})",
        megabytes(cache::size(&dir)),
        megabytes(raw),
        manifest.compression_level
    );
    // What the bundle's own header says; manifest.json is a plain copy anyone can edit.
    let says = |encrypted: bool| if encrypted { "yes (AES-256-GCM)" } else { "no" };
    match cache::bundle_encrypted(&dir) {
        Some(real) if real == manifest.encrypted => println!("encrypted:   {}", says(real)),
        Some(real) => println!(
            "encrypted:   {} (but manifest.json says it is{}: bundle.bin was replaced or edited)",
            says(real),
            if manifest.encrypted { "" } else { " not" }
        ),
        None => println!("encrypted:   unknown (bundle.bin is missing or not a build cache)"),
    }
    if manifest.filerouter_version != env!("CARGO_PKG_VERSION")
        || manifest.guest_sha256 != crate::sandbox::GUEST_SHA256
    {
        println!("stale:       built by another filerouter build; run `filerouter build` again");
        return Ok(());
    }
    // The sources a build would read now, against what this one read.
    if !args.project.join("routes").is_dir() {
        println!("sources:     unknown (the project's routes/ folder is not here)");
        return Ok(());
    }
    let current = super::runtime()?.block_on(build::current_inputs(
        &args.project,
        manifest.compression_level,
        manifest.encrypted,
    ));
    match current {
        Ok(inputs) if inputs == manifest.inputs => println!("sources:     match the build"),
        Ok(_) => {
            println!(
                "sources:     changed since the build (config.py, routes/, a root file, \
                 migrations/, a plugin or .packages/): run `filerouter build` again"
            );
            println!("stale:       yes");
        }
        Err(e) => println!("sources:     unknown ({e:#})"),
    }
    Ok(())
}
