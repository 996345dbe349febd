//! `filerouter db migrate` and `filerouter db status`: the project's migrations against its
//! database, from the command line (what `dev` does at start and on change, and what
//! `run --migrate` does at start for the SQL ones), then its Alembic history ([`alembic`]);
//! `db alembic`, Alembic's own command line in the sandbox; `db backup` and `db restore` of a
//! SQLite database ([`crate::db::backup`]), and the way to do both on Postgres.

use std::path::Path;

use anyhow::Context;

use super::{AlembicArgs, BackupArgs, DbArgs, DbCommand};
use crate::{
    alembic,
    data::{self, Data},
    db::migrations,
    project::Project,
    sandbox::{Sandbox, engine::SandboxEngine},
    scheduler::Scheduler,
};

pub fn run(command: DbCommand) -> anyhow::Result<()> {
    super::runtime()?.block_on(async move {
        match command {
            DbCommand::Migrate(args) => migrate(args).await,
            DbCommand::Status(args) => status(args).await,
            DbCommand::Alembic(args) => alembic_command(args).await,
            DbCommand::Backup(args) => backup(args).await,
            DbCommand::Restore(args) => restore(args).await,
        }
    })
}

/// The project folder, its migrations and its data, opened off the async threads.
async fn open(
    args: &DbArgs,
) -> anyhow::Result<(std::path::PathBuf, Vec<migrations::Migration>, Data, String)> {
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    let dir = data::dir(&root, args.data_dir.as_deref());
    let servers = args.servers.resolve(&root);
    let read_root = root.clone();
    tokio::task::spawn_blocking(move || {
        let found = migrations::read(&read_root)?;
        let data = Data::open_with(&dir, Default::default(), Default::default(), &servers)?;
        let shown = data.db.describe();
        Ok((read_root, found, data, shown))
    })
    .await
    .context("reading the migrations panicked")?
}

/// A sandbox for the project at `root` with `data`, whose instances start from the built-in
/// guest with the project's routes and packages to import (as `dev`'s do before it takes its
/// snapshots), under `config.py`'s limits and with the operator's values: where Alembic runs.
async fn project_sandbox(root: &Path, data: Data) -> anyhow::Result<Sandbox> {
    let scheduler = Scheduler::new(1);
    let load = || async {
        tokio::task::spawn_blocking(|| SandboxEngine::load(1))
            .await
            .context("engine setup panicked")?
            .map_err(anyhow::Error::from)
    };
    let boot = Sandbox::new(load().await?, None, Default::default(), scheduler.tooling())?;
    let settings = boot.load_settings(root).await?;
    drop(boot);
    let routes = Project::routes_dir(root);
    let sandbox = Sandbox::with_data(
        load().await?,
        Some(&routes),
        settings.limits(),
        data,
        scheduler.tooling(),
    )?;
    let environment = settings.project_environment(root).await?;
    Ok(sandbox.with_environment(environment.environment))
}

async fn migrate(args: DbArgs) -> anyhow::Result<()> {
    let (root, found, data, dir) = open(&args).await?;
    let applied = migrations::apply(&data.db, &found).await?;
    for name in &applied {
        println!("applied {}/{name}", migrations::FOLDER);
    }
    println!(
        "database {dir}: {} migration(s) applied now, {} in all",
        applied.len(),
        migrations::status(&data.db, &found).await?.applied.len()
    );
    if let Some(history) = alembic::read(&root).await? {
        let sandbox = project_sandbox(&root, data).await?;
        let outcome = alembic::upgrade(&sandbox, &history).await?;
        print!("{}", outcome.output);
        println!(
            "alembic: at {} (heads: {})",
            shown(&outcome.current),
            shown(&outcome.heads)
        );
    }
    Ok(())
}

fn shown(revisions: &[String]) -> String {
    if revisions.is_empty() {
        "none".into()
    } else {
        revisions.join(", ")
    }
}

async fn status(args: DbArgs) -> anyhow::Result<()> {
    let (root, found, data, dir) = open(&args).await?;
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
    let mut current = status.pending.is_empty() && status.changed.is_empty();
    if let Some(history) = alembic::read(&root).await? {
        let sandbox = project_sandbox(&root, data).await?;
        let outcome = alembic::status(&sandbox, &history).await?;
        println!("alembic:   at {}", shown(&outcome.current));
        println!("heads:     {}", shown(&outcome.heads));
        if !outcome.is_current() {
            println!("pending:   alembic upgrade to the heads (`filerouter db migrate`)");
            current = false;
        }
    }
    if current {
        println!("up to date ({} applied)", status.applied.len());
    }
    Ok(())
}

async fn alembic_command(args: AlembicArgs) -> anyhow::Result<()> {
    let (root, _, data, _) = open(&args.db).await?;
    let sandbox = project_sandbox(&root, data).await?;
    let (outcome, written) = alembic::command(&root, &sandbox, args.args).await?;
    print!("{}", outcome.output);
    for file in &written {
        println!("wrote {file}");
    }
    if outcome.status != 0 {
        anyhow::bail!("alembic exited with status {}", outcome.status);
    }
    Ok(())
}

/// The SQLite file `db backup` and `db restore` work on, and whether the kv store is on Redis
/// (then not in it); on Postgres, an error that says how to back it up there.
fn sqlite_file(args: &DbArgs, verb: &str) -> anyhow::Result<(std::path::PathBuf, bool)> {
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    let servers = args.servers.resolve(&root);
    if let Some(url) = &servers.database_url {
        let (tool, how) = if verb == "backup" {
            (
                "pg_dump",
                format!("pg_dump --format=custom --file=FILE '{url}'"),
            )
        } else {
            (
                "pg_restore",
                format!(
                    "filerouter db status --database-url '{url}' (it makes route code's role), then pg_restore --clean --if-exists --exit-on-error --dbname='{url}' FILE"
                ),
            )
        };
        anyhow::bail!(
            "the project's database is in Postgres ({url}): `filerouter db {verb}` is for the SQLite file; use {tool}: {how} (see the docs' Data guide, \"Backups\")"
        );
    }
    let dir = data::dir(&root, args.data_dir.as_deref());
    Ok((dir.join(crate::db::FILE_NAME), servers.kv_url.is_some()))
}

async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let (database, kv_on_redis) = sqlite_file(&args.db, "backup")?;
    let file = std::path::absolute(&args.file).unwrap_or(args.file.clone());
    let to = file.clone();
    let from = database.clone();
    let kv_file = (!kv_on_redis)
        .then(|| database.with_file_name(crate::kv::sqlite::FILE_NAME))
        .filter(|file| file.is_file());
    let summary = tokio::task::spawn_blocking(move || {
        crate::db::backup::backup(&from, &to, |copy| match &kv_file {
            Some(file) => crate::kv::sqlite::export(file, copy).map(|_| ()),
            None => Ok(()),
        })
    })
    .await
    .context("the backup panicked")??;
    println!(
        "backed up {} into {}: {summary}",
        database.display(),
        file.display()
    );
    if kv_on_redis {
        println!("filerouter.kv is on Redis (--kv-url): it is not in this backup");
    }
    Ok(())
}

async fn restore(args: BackupArgs) -> anyhow::Result<()> {
    let (database, kv_on_redis) = sqlite_file(&args.db, "restore")?;
    let file = std::path::absolute(&args.file).unwrap_or(args.file.clone());
    let (from, to) = (file.clone(), database.clone());
    // The kv file is rebuilt from the backup's kv entries when the kv store next opens.
    let companions: Vec<std::path::PathBuf> = if kv_on_redis {
        Vec::new()
    } else {
        vec![database.with_file_name(crate::kv::sqlite::FILE_NAME)]
    };
    let restored =
        tokio::task::spawn_blocking(move || crate::db::backup::restore(&to, &from, &companions))
            .await
            .context("the restore panicked")??;
    println!("restored {} into {}", file.display(), database.display());
    match &restored.replaced {
        Some((before, kept)) => println!("replaced: {before}; kept as {}", kept.display()),
        None => println!("replaced: nothing (there was no database)"),
    }
    println!("now:      {}", restored.now);
    if restored.now.kv_keys.is_none() && !kv_on_redis {
        println!("the backup holds no kv entries: filerouter.kv is as it was");
    }
    Ok(())
}
