//! Backups of a project's SQLite database (`filerouter db backup FILE`, `db restore FILE`), with
//! SQLite's online backup API.
//!
//! **Backup** copies the database (its tables and the migrations' record) into a new file, in
//! one step of the backup API: the copy is one read transaction, a snapshot of the last commit,
//! while a running server goes on writing (the file is in WAL mode, so readers and the writer
//! do not wait for each other). The caller may add to the copy (the kv store's entries, from
//! their own file: `crate::kv::sqlite::export`). The copy is written to `FILE.partial`, checked
//! (`PRAGMA quick_check`), and only then renamed to `FILE`, a single self-contained file
//! (rollback journal, no `-wal` beside it). An existing `FILE` is refused.
//!
//! **Restore** needs the server stopped: every process that has the database open (`run`,
//! `dev`, a `db migrate`) holds a shared lock on it for as long as it is open (WAL mode), and
//! restore takes the file's exclusive lock first, without waiting, so it refuses while any
//! holds it, and holds it itself until done (a server that starts meanwhile waits, then fails).
//! Before replacing anything it checks that the file is a whole SQLite database
//! (`PRAGMA integrity_check`) with filerouter's record of migrations; it keeps what it replaces
//! beside the database (`db.sqlite3.before-restore-TIME`) and says what both held. When the
//! backup carries kv entries (`_filerouter_kv`), the kv file (a *companion*) is locked, kept
//! aside and removed the same way, and the kv store moves the entries back into a new kv file
//! when it next opens (as it moves those an earlier version kept in the database's file).
//!
//! Not for: Postgres (`pg_dump` and `pg_restore` do it there: docs/guides/data.md), nor
//! deciding where the database is (that is [`crate::data`]).

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use rusqlite::{Connection, OpenFlags, backup::StepResult};

/// The table of applied migrations every database filerouter served has.
const RECORD: &str = "_filerouter_migrations";

/// The kv store's entries, in a backup (`crate::kv::sqlite::export`).
const KV_TABLE: &str = "_filerouter_kv";

/// How long a backup step retries while the database is busy (a checkpoint, a recovery).
const BUSY_FOR: Duration = Duration::from_secs(30);

/// Why a backup or restore did not happen: each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("no database at {0}: nothing to back up (has the project served a request yet?)")]
    NoDatabase(PathBuf),
    #[error("{0} exists already: choose another name, or remove it first")]
    Exists(PathBuf),
    #[error("{path} is not a SQLite database: {reason}")]
    NotSqlite { path: PathBuf, reason: String },
    #[error("{path} is damaged ({reason}): it is not restored")]
    Damaged { path: PathBuf, reason: String },
    #[error(
        "{0} is a SQLite database, but not a filerouter project's: it has no {RECORD} table (the record of applied migrations)"
    )]
    NotProject(PathBuf),
    #[error(
        "{0} is open in another process (a running `filerouter run` or `dev`?): stop it, then restore"
    )]
    InUse(PathBuf),
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
}

/// What a database holds, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The project's tables (not filerouter's own).
    pub tables: usize,
    /// Rows in the migrations' record, and the last applied.
    pub migrations: usize,
    pub last_migration: Option<String>,
    /// Entries of the kv store, when it is in this file.
    pub kv_keys: Option<i64>,
    /// The database's size, in bytes (pages × page size).
    pub bytes: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} table(s), {} migration(s)",
            self.tables, self.migrations
        )?;
        if let Some(last) = &self.last_migration {
            write!(f, " (last {last})")?;
        }
        if let Some(keys) = self.kv_keys {
            write!(f, ", {keys} kv key(s)")?;
        }
        write!(f, ", {} KiB", self.bytes.div_ceil(1024))
    }
}

/// What a restore did.
#[derive(Debug)]
pub struct Restored {
    /// What the database held before, and where that is kept now; `None` when there was none.
    pub replaced: Option<(Summary, PathBuf)>,
    pub now: Summary,
}

/// Copy the database at `database` into the new file `to`, and let `add` write more into the
/// copy (before it is checked); what the copy holds.
pub fn backup(
    database: &Path,
    to: &Path,
    add: impl FnOnce(&Connection) -> rusqlite::Result<()>,
) -> Result<Summary, BackupError> {
    if !database.is_file() {
        return Err(BackupError::NoDatabase(database.to_path_buf()));
    }
    if to.exists() {
        return Err(BackupError::Exists(to.to_path_buf()));
    }
    let partial = with_suffix(to, ".partial");
    let _ = std::fs::remove_file(&partial);
    let result = (|| {
        // Read-write (never written), so that a WAL database no process has open can be read:
        // a read-only connection cannot make its `-shm` file.
        let source = Connection::open_with_flags(
            database,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| io(database, e))?;
        source
            .busy_timeout(Duration::from_secs(5))
            .map_err(|e| io(database, e))?;
        let mut copy = Connection::open(&partial).map_err(|e| io(&partial, e))?;
        copy_all(&source, &mut copy).map_err(|e| io(database, e))?;
        drop(source);
        add(&copy).map_err(|e| io(&partial, e))?;
        // One file, whatever the source's journal mode: no -wal beside the backup.
        copy.pragma_update(None, "journal_mode", "DELETE")
            .map_err(|e| io(&partial, e))?;
        check(&copy, &partial, "quick_check")?;
        let summary = summarize(&copy).map_err(|e| io(&partial, e))?;
        drop(copy);
        std::fs::rename(&partial, to).map_err(|e| io(to, e))?;
        Ok(summary)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// Replace the database at `database` with the backup `from`, which must be a whole
/// filerouter database; refused while another process has `database` (or, when the backup
/// carries kv entries, a file of `companions`) open. Companions are files rebuilt from the
/// database's tables when they next open (the kv file): kept aside and removed.
pub fn restore(
    database: &Path,
    from: &Path,
    companions: &[PathBuf],
) -> Result<Restored, BackupError> {
    let source = open_backup(from)?;
    let carries_kv = table_exists(&source, KV_TABLE).map_err(|e| io(from, e))?;
    let companions: Vec<&PathBuf> = if carries_kv {
        companions.iter().filter(|c| c.is_file()).collect()
    } else {
        Vec::new()
    };
    if let Some(parent) = database.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    }
    let existed = database.is_file();
    let mut target = Connection::open(database).map_err(|e| io(database, e))?;
    target
        .busy_timeout(Duration::ZERO)
        .map_err(|e| io(database, e))?;
    // Exclusive locks on the database and its companions, kept until the connection closes (or
    // the companion is detached): refused while anyone has one open.
    target
        .pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(|e| io(database, e))?;
    for (i, companion) in companions.iter().enumerate() {
        target
            .execute(
                &format!("ATTACH DATABASE ?1 AS companion{i}"),
                [companion.to_string_lossy()],
            )
            .map_err(|e| in_use_or(database, companion, e))?;
    }
    target
        .execute_batch("BEGIN EXCLUSIVE; COMMIT;")
        .map_err(|e| in_use_or(database, database, e))?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let keep = |schema: &str, file: &Path, target: &Connection| -> Result<PathBuf, BackupError> {
        let kept = with_suffix(file, &format!(".before-restore-{stamp}"));
        let mut copy = Connection::open(&kept).map_err(|e| io(&kept, e))?;
        rusqlite::backup::Backup::new_with_names(target, schema, &mut copy, "main")
            .and_then(|backup| run_steps(&backup))
            .map_err(|e| io(file, e))?;
        copy.pragma_update(None, "journal_mode", "DELETE")
            .map_err(|e| io(&kept, e))?;
        Ok(kept)
    };
    let replaced = if existed && has_tables(&target).map_err(|e| io(database, e))? {
        let mut before = summarize(&target).map_err(|e| io(database, e))?;
        if carries_kv {
            before.kv_keys = companion_keys(&target, companions.len());
        }
        let kept = keep("main", database, &target)?;
        Some((before, kept))
    } else {
        None
    };
    for (i, companion) in companions.iter().enumerate() {
        keep(&format!("companion{i}"), companion, &target)?;
        target
            .execute_batch(&format!("DETACH DATABASE companion{i}"))
            .map_err(|e| io(companion, e))?;
        // Still holding the database's lock: no server gets as far as opening its kv file.
        for suffix in ["", "-wal", "-shm"] {
            let file = with_suffix(companion, suffix);
            if let Err(e) = std::fs::remove_file(&file)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(io(&file, e));
            }
        }
    }
    // Out of WAL mode while the pages are replaced (a backup into a WAL database must keep its
    // page size), and back into it after.
    target
        .pragma_update(Some("main"), "journal_mode", "DELETE")
        .map_err(|e| io(database, e))?;
    copy_all(&source, &mut target).map_err(|e| io(database, e))?;
    target
        .pragma_update(Some("main"), "journal_mode", "WAL")
        .map_err(|e| io(database, e))?;
    let now = summarize(&target).map_err(|e| io(database, e))?;
    Ok(Restored { replaced, now })
}

/// A lock another process holds on `file` is [`BackupError::InUse`] of `database`.
fn in_use_or(database: &Path, file: &Path, e: rusqlite::Error) -> BackupError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            BackupError::InUse(database.to_path_buf())
        }
        _ => io(file, e),
    }
}

/// The kv entries in the attached companions, if they have the table.
fn companion_keys(conn: &Connection, companions: usize) -> Option<i64> {
    let mut total = None;
    for i in 0..companions {
        if let Ok(n) = conn.query_row(
            &format!("SELECT count(*) FROM companion{i}.{KV_TABLE}"),
            [],
            |row| row.get::<_, i64>(0),
        ) {
            total = Some(total.unwrap_or(0) + n);
        }
    }
    total
}

/// The backup at `path`, opened read-only and checked whole, with the migrations' record.
fn open_backup(path: &Path) -> Result<Connection, BackupError> {
    if !path.is_file() {
        return Err(BackupError::Io {
            path: path.to_path_buf(),
            reason: "no such file".into(),
        });
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| not_sqlite(path, e))?;
    // The first read tells a file that is no database at all.
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| {
        row.get::<_, i64>(0)
    })
    .map_err(|e| not_sqlite(path, e))?;
    check(&conn, path, "integrity_check")?;
    let record: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [RECORD],
            |row| row.get(0),
        )
        .map_err(|e| not_sqlite(path, e))?;
    if record == 0 {
        return Err(BackupError::NotProject(path.to_path_buf()));
    }
    // The record must be readable as filerouter writes it.
    conn.query_row(
        &format!("SELECT count(name), count(checksum), count(applied_at) FROM {RECORD}"),
        [],
        |_| Ok(()),
    )
    .map_err(|e| BackupError::Damaged {
        path: path.to_path_buf(),
        reason: format!("its {RECORD} table is not filerouter's: {e}"),
    })?;
    Ok(conn)
}

/// `PRAGMA quick_check` or `integrity_check`: anything but `ok` is damage.
fn check(conn: &Connection, path: &Path, pragma: &str) -> Result<(), BackupError> {
    let damaged = |reason: String| BackupError::Damaged {
        path: path.to_path_buf(),
        reason,
    };
    let mut stmt = conn
        .prepare(&format!("PRAGMA {pragma}(5)"))
        .map_err(|e| damaged(e.to_string()))?;
    let found: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| damaged(e.to_string()))?;
    if found == ["ok"] {
        Ok(())
    } else {
        Err(damaged(found.join("; ")))
    }
}

/// Copy every page of `from` into `to` in one step (one read transaction: a consistent copy
/// while others write), retrying while the source is busy.
fn copy_all(from: &Connection, to: &mut Connection) -> rusqlite::Result<()> {
    run_steps(&rusqlite::backup::Backup::new(from, to)?)
}

fn run_steps(backup: &rusqlite::backup::Backup<'_, '_>) -> rusqlite::Result<()> {
    let until = Instant::now() + BUSY_FOR;
    loop {
        match backup.step(-1)? {
            StepResult::Done => return Ok(()),
            StepResult::More | StepResult::Busy | StepResult::Locked if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                    Some(format!(
                        "the database stayed busy for {}s",
                        BUSY_FOR.as_secs()
                    )),
                ));
            }
        }
    }
}

fn table_exists(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = ?1",
        [name],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

fn has_tables(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table'",
        [],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// What `conn`'s database holds.
pub fn summarize(conn: &Connection) -> rusqlite::Result<Summary> {
    let tables: i64 = conn.query_row(
        "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_filerouter\\_%' ESCAPE '\\'",
        [],
        |row| row.get(0),
    )?;
    let exists = |name: &str| table_exists(conn, name);
    let (migrations, last_migration) = if exists(RECORD)? {
        conn.query_row(
            &format!(
                "SELECT count(*), (SELECT name FROM {RECORD} ORDER BY applied_at DESC, name DESC LIMIT 1) FROM {RECORD}"
            ),
            [],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, Option<String>>(1)?)),
        )?
    } else {
        (0, None)
    };
    let kv_keys = if exists(KV_TABLE)? {
        Some(conn.query_row(
            &format!("SELECT count(*) FROM main.{KV_TABLE}"),
            [],
            |row| row.get(0),
        )?)
    } else {
        None
    };
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |row| row.get(0))?;
    Ok(Summary {
        tables: usize::try_from(tables).unwrap_or(0),
        migrations: usize::try_from(migrations).unwrap_or(0),
        last_migration,
        kv_keys,
        bytes: u64::try_from(pages.saturating_mul(page_size)).unwrap_or(0),
    })
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

fn io(path: &Path, e: impl std::fmt::Display) -> BackupError {
    BackupError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// An error on opening or first reading a file: SQLite's "not a database" is the file's kind.
fn not_sqlite(path: &Path, e: rusqlite::Error) -> BackupError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => BackupError::NotSqlite {
            path: path.to_path_buf(),
            reason: "its first bytes are not SQLite's header".into(),
        },
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => BackupError::Damaged {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
        _ => io(path, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project_db(path: &Path, rows: i64) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE {RECORD} (name TEXT PRIMARY KEY NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL);
             INSERT INTO {RECORD} VALUES ('0001_posts.sql', 'x', '2026-01-01T00:00:00Z');
             CREATE TABLE posts (id INTEGER PRIMARY KEY, title TEXT);"
        ))
        .unwrap();
        for i in 0..rows {
            conn.execute("INSERT INTO posts (title) VALUES (?1)", [format!("p{i}")])
                .unwrap();
        }
    }

    fn count(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM posts", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_backup_restores_and_keeps_what_it_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let (db, copy) = (dir.path().join("db.sqlite3"), dir.path().join("b.sqlite3"));
        project_db(&db, 3);
        let summary = backup(&db, &copy, |_| Ok(())).unwrap();
        assert_eq!((summary.tables, summary.migrations), (1, 1));
        assert!(matches!(
            backup(&db, &copy, |_| Ok(())),
            Err(BackupError::Exists(_))
        ));
        Connection::open(&db)
            .unwrap()
            .execute("DELETE FROM posts", [])
            .unwrap();
        let restored = restore(&db, &copy, &[]).unwrap();
        assert_eq!(count(&db), 3);
        let (before, kept) = restored.replaced.unwrap();
        assert_eq!(before.migrations, 1);
        assert_eq!(count(&kept), 0);
        assert_eq!(
            restored.now.last_migration.as_deref(),
            Some("0001_posts.sql")
        );
    }

    #[test]
    fn restore_refuses_while_the_database_is_open_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let (db, copy) = (dir.path().join("db.sqlite3"), dir.path().join("b.sqlite3"));
        project_db(&db, 1);
        backup(&db, &copy, |_| Ok(())).unwrap();
        // SQLite's locks are per process: another process holds it open.
        let mut holder = std::process::Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import sqlite3, sys, time\nc = sqlite3.connect({:?})\nc.execute('SELECT 1 FROM posts').fetchall()\nprint('open', flush=True)\ntime.sleep(30)",
                db.display().to_string()
            ))
            .stdout(std::process::Stdio::piped())
            .spawn();
        let Ok(child) = holder.as_mut() else {
            eprintln!("skipping: no python3");
            return;
        };
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let refused = restore(&db, &copy, &[]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(matches!(refused, Err(BackupError::InUse(_))), "{refused:?}");
        restore(&db, &copy, &[]).unwrap();
    }

    #[test]
    fn files_that_are_not_project_databases_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db.sqlite3");
        project_db(&db, 1);
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a database, but long enough to have a header of sorts......................................................................").unwrap();
        assert!(matches!(
            restore(&db, &text, &[]),
            Err(BackupError::NotSqlite { .. })
        ));
        let other = dir.path().join("other.sqlite3");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        assert!(matches!(
            restore(&db, &other, &[]),
            Err(BackupError::NotProject(_))
        ));
        assert!(matches!(
            restore(&db, &dir.path().join("missing"), &[]),
            Err(BackupError::Io { .. })
        ));
        assert_eq!(count(&db), 1);
    }
}
