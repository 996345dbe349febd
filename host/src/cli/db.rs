//! `filerouter db migrate` and `filerouter db status`: the project's migrations against its
//! database, from the command line (what `dev` does at start and on change, and what
//! `run --migrate` does at start).

use anyhow::Context;

use super::{DbArgs, DbCommand};
use crate::{
    data::{self, Data},
    db::migrations,
};

pub fn run(command: DbCommand) -> anyhow::Result<()> {
    super::runtime()?.block_on(async move {
        match command {
            DbCommand::Migrate(args) => migrate(args).await,
            DbCommand::Status(args) => status(args).await,
        }
    })
}

/// The project folder, its migrations and its data, opened off the async threads.
async fn open(args: &DbArgs) -> anyhow::Result<(Vec<migrations::Migration>, Data, String)> {
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    let dir = data::dir(&root, args.data_dir.as_deref());
    let servers = args.servers.resolve(&root);
    tokio::task::spawn_blocking(move || {
        let found = migrations::read(&root)?;
        let data = Data::open_with(&dir, Default::default(), Default::default(), &servers)?;
        let shown = data.db.describe();
        Ok((found, data, shown))
    })
    .await
    .context("reading the migrations panicked")?
}

async fn migrate(args: DbArgs) -> anyhow::Result<()> {
    let (found, data, dir) = open(&args).await?;
    let applied = migrations::apply(&data.db, &found).await?;
    for name in &applied {
        println!("applied {}/{name}", migrations::FOLDER);
    }
    println!(
        "database {dir}: {} migration(s) applied now, {} in all",
        applied.len(),
        migrations::status(&data.db, &found).await?.applied.len()
    );
    Ok(())
}

async fn status(args: DbArgs) -> anyhow::Result<()> {
    let (found, data, dir) = open(&args).await?;
    let status = migrations::status(&data.db, &found).await?;
    println!("database:  {dir}");
    for (name, at) in &status.applied {
        let note = if status.changed.contains(name) {
            " (changed since: not applied again)"
        } else if status.missing.contains(name) {
            " (its file is gone)"
        } else {
            ""
        };
        println!("applied:   {name}  {at}{note}");
    }
    for name in &status.pending {
        println!("pending:   {name}");
    }
    if status.pending.is_empty() && status.changed.is_empty() {
        println!("up to date ({} applied)", status.applied.len());
    }
    Ok(())
}
