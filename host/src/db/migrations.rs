//! The project's migrations: `migrations/*.sql`, applied in file-name order, each once, each in
//! a transaction of its own, and recorded in the database (`_filerouter_migrations`: name,
//! checksum, when).
//!
//! A step may have a variant per backend beside it (`0001_posts.postgres.sql`,
//! `0001_posts.sqlite.sql`), run instead of the shared file on that backend and recorded under
//! the step's name (`0001_posts.sql`), so that SQLite and Postgres keep one history. Every step
//! must run on both ([`read`] refuses one that does not).
//!
//! A migration that fails leaves the database as it was before that file (the transaction is
//! rolled back) and is reported with its file and the line of the failing statement. A file
//! changed after it was applied is reported, never applied again. `dev` applies new migrations
//! at start and on change, `filerouter db migrate` on demand; `run` refuses a database that is
//! behind the build's migrations unless started with `--migrate`. Migration SQL runs under the
//! same guard as route code's ([`super::guard`]): it is the project's code too.
//!
//! On Postgres ([`super::postgres`]) the record is `_filerouter.migrations`, in a schema only
//! the URL's role may use ([`super::postgres::roles`]); each file runs as route code's role
//! (it is the project's code), as one simple query inside its own transaction, under an
//! advisory lock so that several processes starting at once apply each file once. A failure names the line when
//! Postgres gives the error's position (a syntax error, an unknown table or column); when it
//! does not (a constraint that fails while the file runs), only the file.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Database, DbError, guard, pg_text, postgres, sqlite};
use crate::regular_file::{self, FileError};

/// The folder, relative to the project.
pub const FOLDER: &str = "migrations";

/// At most this many migration files are read.
const MAX_FILES: usize = 10_000;

/// One step of the project's history: a migration file, or its variants for each backend.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Migration {
    /// The step's name, as the record keeps it on either backend (`0001_posts.sql`).
    pub name: String,
    /// What SQLite runs: the text of [`Migration::file`].
    pub sql: String,
    /// The file SQLite runs: `0001_posts.sql`, or `0001_posts.sqlite.sql` beside it (empty:
    /// the step's name).
    #[serde(default)]
    pub file: String,
    /// What Postgres runs instead, when a variant differs: (file, text).
    #[serde(default)]
    pub postgres: Option<(String, String)>,
}

impl Migration {
    fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }

    /// The file that is run, for messages.
    fn file(&self) -> &str {
        if self.file.is_empty() {
            &self.name
        } else {
            &self.file
        }
    }

    /// This step as the backend runs it (`postgres`: Postgres, else SQLite).
    fn on(&self, postgres: bool) -> Migration {
        match (&self.postgres, postgres) {
            (Some((file, sql)), true) => Migration {
                name: self.name.clone(),
                sql: sql.clone(),
                file: file.clone(),
                postgres: None,
            },
            _ => Migration {
                postgres: None,
                ..self.clone()
            },
        }
    }
}

/// The steps as `db`'s backend runs them.
fn on_backend(db: &Database, migrations: &[Migration]) -> Vec<Migration> {
    let postgres = db.postgres().is_some();
    migrations.iter().map(|m| m.on(postgres)).collect()
}

/// A migration file's backend, from its name: `NAME.sqlite.sql`, `NAME.postgres.sql`, or
/// `NAME.sql` for both; with the step's name (`NAME.sql`).
fn variant_of(file: &str) -> (String, Option<Engine>) {
    for (suffix, engine) in [
        (".sqlite.sql", Engine::Sqlite),
        (".postgres.sql", Engine::Postgres),
    ] {
        if let Some(stem) = file.strip_suffix(suffix) {
            return (format!("{stem}.sql"), Some(engine));
        }
    }
    (file.to_string(), None)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
}

/// Why migrations could not be read or applied: one line naming the file (and line).
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("{FOLDER}/: {0}")]
    Folder(String),
    #[error(transparent)]
    Read(#[from] FileError),
    #[error(
        "{FOLDER}/{file}{}: {message} (the database is as it was before this migration)",
        .line.map(|l| format!(":{l}")).unwrap_or_default()
    )]
    Failed {
        file: String,
        /// The line of the failing statement, when it is known.
        line: Option<usize>,
        message: String,
    },
    #[error(
        "{FOLDER}/{0} was changed after it was applied; migrations are applied once: undo the edit and add a new migration"
    )]
    Changed(String),
    #[error("the database is behind the build's migrations ({} pending: {})", .0.len(), .0.join(", "))]
    Behind(Vec<String>),
    #[error("the database: {0}")]
    Database(#[from] DbError),
}

/// The `migrations/*.sql` files of the project at `root`, by name; none if there is no folder.
/// Blocking.
pub fn read(root: &Path) -> Result<Vec<Migration>, MigrationError> {
    let dir = root.join(FOLDER);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(MigrationError::Folder(e.to_string())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| MigrationError::Folder(e.to_string()))?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.ends_with(".sql") && !name.starts_with('.') {
            names.push(name);
        }
        if names.len() > MAX_FILES {
            return Err(MigrationError::Folder(format!(
                "more than {MAX_FILES} migration files"
            )));
        }
    }
    names.sort();
    let read_text = |name: &str| -> Result<String, MigrationError> {
        // A link may lead to another file of the project, never out of it.
        let path = dir.join(name);
        let bytes = regular_file::read_inside(&path, root, regular_file::MAX_SOURCE_BYTES)?;
        Ok(String::from_utf8(bytes).map_err(|_| FileError::NotText(path))?)
    };
    // Each step's files: (both, sqlite, postgres).
    let mut steps: std::collections::BTreeMap<String, [Option<String>; 3]> = Default::default();
    for name in names {
        let (step, engine) = variant_of(&name);
        let slot = match engine {
            None => 0,
            Some(Engine::Sqlite) => 1,
            Some(Engine::Postgres) => 2,
        };
        steps.entry(step).or_default()[slot] = Some(name);
    }
    steps
        .into_iter()
        .map(|(step, files)| {
            let stem = step.trim_end_matches(".sql");
            let [both, sqlite, postgres] = files;
            let sqlite = match (sqlite, &both) {
                (Some(file), _) => file,
                (None, Some(file)) => file.clone(),
                (None, None) => {
                    return Err(MigrationError::Folder(format!(
                        "{stem}.postgres.sql has no SQLite variant: add {stem}.sql (for both) or {stem}.sqlite.sql, so that both backends have the same history"
                    )));
                }
            };
            let postgres = match (postgres, &both) {
                (Some(file), _) => file,
                (None, Some(file)) => file.clone(),
                (None, None) => {
                    return Err(MigrationError::Folder(format!(
                        "{stem}.sqlite.sql has no Postgres variant: add {stem}.sql (for both) or {stem}.postgres.sql, so that both backends have the same history"
                    )));
                }
            };
            if let Some(both) = &both
                && &sqlite != both
                && &postgres != both
            {
                return Err(MigrationError::Folder(format!(
                    "{both} is run by neither backend ({sqlite} and {postgres} take its place): remove it"
                )));
            }
            let sql = read_text(&sqlite)?;
            let postgres = if postgres == sqlite {
                None
            } else {
                let text = read_text(&postgres)?;
                Some((postgres, text))
            };
            Ok(Migration {
                name: step,
                sql,
                file: sqlite,
                postgres,
            })
        })
        .collect()
}

/// Read the project's migrations and apply the pending ones (`dev` at start and on change).
pub async fn apply_folder(root: &Path, db: &Database) -> Result<Vec<String>, MigrationError> {
    let root = root.to_path_buf();
    let migrations = tokio::task::spawn_blocking(move || read(&root))
        .await
        .map_err(|e| MigrationError::Folder(format!("reading failed: {e}")))??;
    apply(db, &migrations).await
}

/// Make sure the database has every one of a build's `migrations` before it is served: apply
/// the pending ones if `apply` (returning their names), else refuse a database behind them
/// ([`MigrationError::Behind`]) or one that applied a file the build has changed since.
pub async fn ensure(
    db: &Database,
    migrations: &[Migration],
    apply: bool,
) -> Result<Vec<String>, MigrationError> {
    if apply {
        return self::apply(db, migrations).await;
    }
    let status = status(db, migrations).await?;
    if let Some(changed) = status.changed.first() {
        return Err(MigrationError::Changed(changed.clone()));
    }
    if !status.pending.is_empty() {
        return Err(MigrationError::Behind(status.pending));
    }
    Ok(Vec::new())
}

/// The revisions Alembic's `alembic_version` table (one of route code's tables, which Alembic
/// makes on its first upgrade) says the database is at, sorted; none without the table. For
/// `crate::alembic`, which runs Alembic itself in the sandbox.
pub async fn alembic_versions(db: &Database) -> Result<Vec<String>, DbError> {
    let mut versions = if let Some(pool) = db.postgres() {
        let mut conn = pool.host().await?;
        let found = conn
            .host_query(
                "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'public' AND tablename = 'alembic_version'",
                &[],
            )
            .await?;
        if found.first().and_then(|row| row.first()).cloned().flatten() != Some("1".into()) {
            return Ok(Vec::new());
        }
        conn.host_query("SELECT version_num FROM public.alembic_version", &[])
            .await?
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .collect()
    } else {
        db.with_connection(|conn| {
            conn.trusted(|raw| {
                let failed = |e: rusqlite::Error| DbError::Unavailable(e.to_string());
                let found: i64 = raw
                    .query_row(
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'",
                        [],
                        |row| row.get(0),
                    )
                    .map_err(failed)?;
                if found == 0 {
                    return Ok(Vec::new());
                }
                let mut stmt = raw
                    .prepare("SELECT version_num FROM alembic_version")
                    .map_err(failed)?;
                let rows = stmt
                    .query_map([], |row| row.get::<_, String>(0))
                    .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                    .map_err(failed)?;
                Ok(rows)
            })
        })
        .await??
    };
    versions.sort();
    Ok(versions)
}

/// Where a database stands against a list of migrations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Applied, with when (UTC, RFC 3339), in the order they were applied.
    pub applied: Vec<(String, String)>,
    /// Not applied yet, in the order they will be.
    pub pending: Vec<String>,
    /// Applied, but the file differs now.
    pub changed: Vec<String>,
    /// Applied, but no longer among the files.
    pub missing: Vec<String>,
}

const RECORD: &str = "CREATE TABLE IF NOT EXISTS _filerouter_migrations (
    name TEXT PRIMARY KEY NOT NULL,
    checksum TEXT NOT NULL,
    applied_at TEXT NOT NULL
)";

/// Compare the database's record with `migrations`.
pub async fn status(db: &Database, migrations: &[Migration]) -> Result<Status, MigrationError> {
    let migrations = &on_backend(db, migrations);
    if let Some(pool) = db.postgres() {
        let mut conn = pool.host().await?;
        return pg_compare(&mut conn, migrations, false).await;
    }
    let migrations = migrations.to_vec();
    let status = db
        .with_connection(move |conn| conn.trusted(|raw| Ok(compare(raw, &migrations))))
        .await???;
    Ok(status)
}

fn compare(raw: &rusqlite::Connection, migrations: &[Migration]) -> Result<Status, MigrationError> {
    let failed = |e: rusqlite::Error| MigrationError::Database(DbError::Unavailable(e.to_string()));
    raw.execute_batch(RECORD).map_err(failed)?;
    let mut stmt = raw
        .prepare("SELECT name, checksum, applied_at FROM _filerouter_migrations ORDER BY applied_at, name")
        .map_err(failed)?;
    let recorded: Vec<(String, String, String)> = stmt
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(failed)?;
    Ok(compare_records(&recorded, migrations))
}

/// Where `recorded` (name, checksum, when) stands against `migrations`.
fn compare_records(recorded: &[(String, String, String)], migrations: &[Migration]) -> Status {
    let mut status = Status::default();
    for (name, checksum, at) in recorded {
        match migrations.iter().find(|m| &m.name == name) {
            Some(m) if &m.checksum() != checksum => status.changed.push(name.clone()),
            Some(_) => {}
            None => status.missing.push(name.clone()),
        }
        status.applied.push((name.clone(), at.clone()));
    }
    status.pending = migrations
        .iter()
        .filter(|m| !recorded.iter().any(|(name, ..)| name == &m.name))
        .map(|m| m.name.clone())
        .collect();
    status
}

/// Apply the pending `migrations` in order; returns the names applied. Stops at the first that
/// fails (its transaction rolled back) or at a changed file.
pub async fn apply(db: &Database, migrations: &[Migration]) -> Result<Vec<String>, MigrationError> {
    let migrations = &on_backend(db, migrations);
    if let Some(pool) = db.postgres() {
        return pg_apply(pool, migrations).await;
    }
    let migrations = migrations.to_vec();
    db.with_connection(move |conn| apply_all(conn, &migrations))
        .await?
}

fn apply_all(
    conn: &mut sqlite::Connection,
    migrations: &[Migration],
) -> Result<Vec<String>, MigrationError> {
    let status = conn.trusted(|raw| Ok(compare(raw, migrations)))??;
    if let Some(changed) = status.changed.first() {
        return Err(MigrationError::Changed(changed.clone()));
    }
    let mut applied = Vec::new();
    for migration in migrations
        .iter()
        .filter(|m| status.pending.contains(&m.name))
    {
        apply_one(conn, migration)?;
        applied.push(migration.name.clone());
    }
    Ok(applied)
}

fn apply_one(conn: &mut sqlite::Connection, migration: &Migration) -> Result<(), MigrationError> {
    let host = |e: rusqlite::Error| MigrationError::Database(DbError::Unavailable(e.to_string()));
    conn.trusted(|raw| Ok(raw.execute_batch("BEGIN IMMEDIATE")))?
        .map_err(host)?;
    let ran = conn.run_untrusted_script(&migration.sql, |sql| {
        match guard::first_keyword(sql).map(str::to_ascii_uppercase).as_deref() {
            Some("BEGIN" | "COMMIT" | "END" | "ROLLBACK") => Err(DbError::Programming(
                "a migration runs in a transaction of its own: leave out BEGIN, COMMIT and ROLLBACK".into(),
            )),
            _ => guard::check_statement(sql),
        }
    });
    let recorded = ran.and_then(|()| {
        conn.trusted(|raw| {
            Ok(raw.execute(
                "INSERT INTO _filerouter_migrations (name, checksum, applied_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![
                    migration.name,
                    migration.checksum(),
                    now_rfc3339()
                ],
            ))
        })
        .map_err(|e| (e, 0))?
        .map_err(|e| (DbError::Unavailable(e.to_string()), 0))?;
        conn.trusted(|raw| Ok(raw.execute_batch("COMMIT")))
            .map_err(|e| (e, 0))?
            .map_err(|e| (DbError::Unavailable(e.to_string()), 0))
    });
    if let Err((error, offset)) = recorded {
        let _ = conn.trusted(|raw| Ok(raw.execute_batch("ROLLBACK")));
        return Err(MigrationError::Failed {
            file: migration.file().to_string(),
            line: Some(line_of(&migration.sql, offset)),
            message: error.to_string(),
        });
    }
    Ok(())
}

/// The advisory lock that makes one process at a time apply migrations to a Postgres
/// database (`filerouter` in ASCII).
const PG_LOCK: i64 = 0x6669_6c65_726f_7574;

/// How long applying waits for a migration's transaction that another connection left open
/// (a process that died while committing) to end.
const PG_SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The Postgres record as the owner reads it: (name, checksum, when, where its transaction
/// stands: `committed`, `aborted`, `in progress`, or `unknown` when too old to tell).
async fn pg_records(
    conn: &mut postgres::Connection,
) -> Result<Vec<(String, String, String, String)>, MigrationError> {
    let rows = conn
        .host_query(
            &format!(
                "SELECT name, checksum, applied_at,
                        CASE WHEN xid IS NULL THEN 'committed'
                             ELSE coalesce(pg_catalog.txid_status(xid), 'unknown') END
                   FROM {} ORDER BY applied_at, name",
                postgres::roles::RECORD
            ),
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let mut row = row.into_iter().map(Option::unwrap_or_default);
            let mut next = || row.next().unwrap_or_default();
            (next(), next(), next(), next())
        })
        .collect())
}

/// Compare the record in Postgres with `migrations`. A migration is applied when its
/// transaction committed: with `settle` (the apply lock held), rows whose transaction aborted
/// are removed and committed ones marked so; without, a row still in progress is pending.
async fn pg_compare(
    conn: &mut postgres::Connection,
    migrations: &[Migration],
    settle: bool,
) -> Result<Status, MigrationError> {
    let until = std::time::Instant::now() + PG_SETTLE;
    let records = loop {
        let records = pg_records(conn).await?;
        let open = records.iter().any(|r| r.3 == "in progress");
        if !settle || !open || std::time::Instant::now() >= until {
            break records;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let mut recorded = Vec::new();
    for (name, checksum, at, state) in records {
        match state.as_str() {
            "committed" => {
                if settle {
                    pg_settle(conn, &name, "UPDATE {} SET xid = NULL").await?;
                }
                recorded.push((name, checksum, at));
            }
            "aborted" if settle => pg_settle(conn, &name, "DELETE FROM {}").await?,
            "aborted" => {}
            "in progress" if settle => {
                return Err(MigrationError::Database(DbError::Unavailable(format!(
                    "the transaction that applies {FOLDER}/{name} is still open on another connection after {}s: try again later",
                    PG_SETTLE.as_secs()
                ))));
            }
            "in progress" => {}
            _ => {
                return Err(MigrationError::Database(DbError::Unavailable(format!(
                    "cannot tell whether the transaction that applied {FOLDER}/{name} committed (it is too old): check the database by hand, then keep the record's row (UPDATE {record} SET xid = NULL WHERE name = '{name}') or delete it",
                    record = postgres::roles::RECORD
                ))));
            }
        }
    }
    Ok(compare_records(&recorded, migrations))
}

/// Run `statement` (`{}`: the record) on the record's row of `name` whose transaction ended.
async fn pg_settle(
    conn: &mut postgres::Connection,
    name: &str,
    statement: &str,
) -> Result<(), MigrationError> {
    let sql = format!(
        "{} WHERE name = $1 AND xid IS NOT NULL",
        statement.replace("{}", postgres::roles::RECORD)
    );
    conn.host_query(&sql, &[name]).await?;
    Ok(())
}

async fn pg_apply(
    pool: &postgres::Pool,
    migrations: &[Migration],
) -> Result<Vec<String>, MigrationError> {
    let mut owner = pool.host().await?;
    // Released when the connection goes back to the pool (DISCARD ALL), or closes.
    owner
        .host_query(&format!("SELECT pg_advisory_lock({PG_LOCK})::text"), &[])
        .await?;
    let status = pg_compare(&mut owner, migrations, true).await?;
    if let Some(changed) = status.changed.first() {
        return Err(MigrationError::Changed(changed.clone()));
    }
    let mut applied = Vec::new();
    for migration in migrations
        .iter()
        .filter(|m| status.pending.contains(&m.name))
    {
        pg_apply_one(pool, &mut owner, migration).await?;
        applied.push(migration.name.clone());
    }
    Ok(applied)
}

/// Apply one migration as route code's role (it is the project's code), and record it as the
/// owner. The two are two connections, so the record's row names the migration's transaction
/// (`txid_current()`), written before it commits: the row counts only once that transaction
/// committed ([`pg_compare`]), so a crash between the two commits cannot leave a migration
/// applied but unrecorded, nor recorded but not applied.
async fn pg_apply_one(
    pool: &postgres::Pool,
    owner: &mut postgres::Connection,
    migration: &Migration,
) -> Result<(), MigrationError> {
    let failed = |line: Option<usize>, error: DbError| MigrationError::Failed {
        file: migration.file().to_string(),
        line,
        message: error.to_string(),
    };
    let statements = pg_text::statements(&migration.sql);
    for statement in &statements {
        let line = Some(line_of(
            &migration.sql,
            statement.offset + leading(statement.text),
        ));
        let words = pg_text::keywords(statement.text, 2);
        match words
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [
                "BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT",
                ..,
            ]
            | ["PREPARE", "TRANSACTION"] => {
                return Err(failed(
                    line,
                    DbError::Programming(
                        "a migration runs in a transaction of its own: leave out BEGIN, COMMIT, ROLLBACK and PREPARE TRANSACTION".into(),
                    ),
                ));
            }
            _ => postgres::check_untrusted(statement.text).map_err(|e| failed(line, e))?,
        }
    }
    let mut conn = pool.migrator().await?;
    let database = |e: tokio_postgres::Error| MigrationError::Database(postgres::error(&e));
    conn.host_script("BEGIN").await.map_err(database)?;
    let xid = transaction_id(&mut conn).await?;
    if let Err(e) = conn.host_script(&migration.sql).await {
        let _ = conn.host_script("ROLLBACK").await;
        let line = postgres::error_offset(&e, &migration.sql)
            .map(|offset| line_of(&migration.sql, offset))
            .or_else(|| match statements.as_slice() {
                [only] => Some(line_of(&migration.sql, only.offset + leading(only.text))),
                _ => None,
            });
        return Err(failed(line, postgres::error(&e)));
    }
    // Still the transaction it began in (nothing in it ended or prepared it).
    if transaction_id(&mut conn).await.ok().as_ref() != Some(&xid) {
        let _ = conn.host_script("ROLLBACK").await;
        return Err(failed(
            None,
            DbError::Programming("the migration ended its transaction".into()),
        ));
    }
    let record = format!(
        "INSERT INTO {} (name, checksum, applied_at, xid) VALUES ($1, $2, $3, $4)",
        postgres::roles::RECORD
    );
    let recorded = owner
        .host_query(
            &record,
            &[
                migration.name.as_str(),
                migration.checksum().as_str(),
                now_rfc3339().as_str(),
                xid.as_str(),
            ],
        )
        .await;
    if let Err(error) = recorded {
        let _ = conn.host_script("ROLLBACK").await;
        return Err(failed(None, error));
    }
    let committed = conn.host_script("COMMIT").await;
    drop(conn);
    // Whatever COMMIT answered, the transaction's status says what happened.
    let state = owner
        .host_query("SELECT pg_catalog.txid_status($1)", &[xid.as_str()])
        .await?
        .into_iter()
        .next()
        .and_then(|row| row.into_iter().next().flatten());
    match state.as_deref() {
        Some("committed") => {
            pg_settle(owner, &migration.name, "UPDATE {} SET xid = NULL").await?;
            Ok(())
        }
        Some("aborted") => {
            pg_settle(owner, &migration.name, "DELETE FROM {}").await?;
            Err(failed(
                None,
                match committed {
                    Err(e) => postgres::error(&e),
                    Ok(()) => DbError::Operational("its transaction was rolled back".into()),
                },
            ))
        }
        _ => Err(MigrationError::Database(DbError::Unavailable(format!(
            "the connection broke while {FOLDER}/{} was committing: the next start tells whether it was applied",
            migration.name
        )))),
    }
}

/// The id of the transaction open on `conn` (assigned now if it has none yet).
async fn transaction_id(conn: &mut postgres::Connection) -> Result<String, MigrationError> {
    conn.host_query("SELECT pg_catalog.txid_current()::text", &[])
        .await?
        .into_iter()
        .next()
        .and_then(|row| row.into_iter().next().flatten())
        .ok_or_else(|| {
            MigrationError::Database(DbError::Unavailable(
                "the database gave no transaction id".into(),
            ))
        })
}

/// The bytes of white space and comments at the start of a statement.
fn leading(text: &str) -> usize {
    text.len() - guard::skip_space_and_comments(text).len()
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Now, as `2026-11-24T21:16:18Z`.
fn now_rfc3339() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration(name: &str, sql: &str) -> Migration {
        Migration {
            name: name.into(),
            sql: sql.into(),
            file: String::new(),
            postgres: None,
        }
    }

    #[test]
    fn variants_for_one_backend_take_the_shared_files_place_there() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(FOLDER);
        std::fs::create_dir(&folder).unwrap();
        let write = |name: &str, text: &str| std::fs::write(folder.join(name), text).unwrap();
        write(
            "0001_posts.sql",
            "CREATE TABLE posts (id INTEGER PRIMARY KEY);",
        );
        write(
            "0001_posts.postgres.sql",
            "CREATE TABLE posts (id SERIAL PRIMARY KEY);",
        );
        write("0002_tags.sql", "CREATE TABLE tags (name TEXT);");
        write("0003_seen.sqlite.sql", "ALTER TABLE posts ADD seen TEXT;");
        write(
            "0003_seen.postgres.sql",
            "ALTER TABLE posts ADD seen TIMESTAMPTZ;",
        );
        let read = read(dir.path()).unwrap();
        let names: Vec<_> = read.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["0001_posts.sql", "0002_tags.sql", "0003_seen.sql"]);
        let on = |postgres: bool| -> Vec<(String, String)> {
            read.iter()
                .map(|m| m.on(postgres))
                .map(|m| (m.file().to_string(), m.sql))
                .collect()
        };
        assert_eq!(
            on(false),
            [
                (
                    "0001_posts.sql".into(),
                    "CREATE TABLE posts (id INTEGER PRIMARY KEY);".into()
                ),
                (
                    "0002_tags.sql".into(),
                    "CREATE TABLE tags (name TEXT);".into()
                ),
                (
                    "0003_seen.sqlite.sql".into(),
                    "ALTER TABLE posts ADD seen TEXT;".into()
                ),
            ]
        );
        assert_eq!(
            on(true),
            [
                (
                    "0001_posts.postgres.sql".into(),
                    "CREATE TABLE posts (id SERIAL PRIMARY KEY);".into()
                ),
                (
                    "0002_tags.sql".into(),
                    "CREATE TABLE tags (name TEXT);".into()
                ),
                (
                    "0003_seen.postgres.sql".into(),
                    "ALTER TABLE posts ADD seen TIMESTAMPTZ;".into()
                ),
            ]
        );
        // A step one backend lacks, and a shared file neither runs, are refused by name.
        write("0004_only.postgres.sql", "SELECT 1;");
        let error = super::read(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("0004_only.postgres.sql has no SQLite variant"),
            "{error}"
        );
        std::fs::remove_file(folder.join("0004_only.postgres.sql")).unwrap();
        write("0003_seen.sql", "SELECT 1;");
        let error = super::read(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("0003_seen.sql is run by neither backend"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn applies_in_order_once_and_reports_the_failing_line() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path(), super::super::Bounds::default()).unwrap();
        let first = vec![
            migration(
                "0001_posts.sql",
                "CREATE TABLE posts (id INTEGER PRIMARY KEY, title TEXT NOT NULL);\n",
            ),
            migration(
                "0002_seed.sql",
                "INSERT INTO posts (title) VALUES ('hello');\n",
            ),
        ];
        assert_eq!(
            apply(&db, &first).await.unwrap(),
            ["0001_posts.sql", "0002_seed.sql"]
        );
        assert!(apply(&db, &first).await.unwrap().is_empty());

        let mut broken = first.clone();
        broken.push(migration(
            "0003_broken.sql",
            "INSERT INTO posts (title) VALUES ('two');\n\n-- a typo:\nINSERT INTO postz (title) VALUES ('x');\n",
        ));
        let error = apply(&db, &broken).await.unwrap_err().to_string();
        assert!(
            error.starts_with("migrations/0003_broken.sql:4: no such table: postz"),
            "{error}"
        );
        let state = status(&db, &broken).await.unwrap();
        assert_eq!(state.pending, ["0003_broken.sql"]);
        // Nothing of the failed file stayed: still one post.
        let count = db
            .with_connection(|conn| {
                conn.trusted(|raw| {
                    raw.query_row("SELECT count(*) FROM posts", [], |r| r.get::<_, i64>(0))
                        .map_err(|e| DbError::Unavailable(e.to_string()))
                })
            })
            .await
            .unwrap();
        assert_eq!(count, Ok(1));

        let mut edited = first.clone();
        edited[0].sql.push_str("-- changed\n");
        assert!(matches!(
            apply(&db, &edited).await,
            Err(MigrationError::Changed(_))
        ));
        assert_eq!(
            status(&db, &edited).await.unwrap().changed,
            ["0001_posts.sql"]
        );
    }

    #[tokio::test]
    async fn migrations_are_guarded_like_route_code() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path(), super::super::Bounds::default()).unwrap();
        for (sql, word) in [
            (
                "CREATE TABLE a (x);\nATTACH DATABASE '/tmp/x.db' AS x;\n",
                "ATTACH",
            ),
            ("PRAGMA journal_mode = DELETE;", "PRAGMA journal_mode"),
            ("CREATE TABLE b (x);\nCOMMIT;", "BEGIN, COMMIT"),
            (
                "DELETE FROM _filerouter_migrations;",
                "_filerouter_migrations",
            ),
        ] {
            let error = apply(&db, &[migration("0001.sql", sql)])
                .await
                .unwrap_err()
                .to_string();
            assert!(error.contains(word), "{sql}: {error}");
        }
        assert_eq!(status(&db, &[]).await.unwrap().applied.len(), 0);
    }
}
