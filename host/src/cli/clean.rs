//! `filerouter clean`: remove the build cache.

use super::CacheArgs;
use crate::{cache, cli::build::megabytes};

pub fn run(args: CacheArgs) -> anyhow::Result<()> {
    let dir = super::cache_dir(&args.project, args.cache_dir.as_deref())?;
    if cache::manifest(&dir).is_none() && cache::size(&dir) == 0 {
        println!("nothing to clean in {}", dir.display());
        return Ok(());
    }
    let freed = cache::remove(&dir)?;
    println!("removed {} ({})", dir.display(), megabytes(freed));
    Ok(())
}
