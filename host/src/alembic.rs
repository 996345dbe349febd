//! The project's Alembic history: `alembic.ini` and the `alembic/` folder that `alembic init
//! alembic` makes (`env.py`, `script.py.mako`, `versions/*.py`), run in the sandbox against the
//! project's database, SQLite or Postgres alike.
//!
//! Alembic is the project's Python, so it runs where all of it does: in a guest instance
//! ([`Sandbox::alembic`]), with the routes and the project's packages importable as in `dev`
//! (SQLAlchemy and Alembic come from `filerouter packages install`). The guest sees a copy of
//! the history that this module [stages](History::stage) in a folder of its own, never the
//! project folder: read-only when a history is applied, writable for `filerouter db alembic`,
//! whose new and changed files (a `revision --autogenerate`, an `init`) this module copies back
//! into `alembic/` after checking them ([`write_back`]).
//!
//! When a history is applied: `dev` at start and whenever a file of it changes, and `filerouter
//! db migrate`, each after the SQL migrations (`crate::db::migrations`); `filerouter build`
//! records the history's heads, and `run` refuses a database that is not at them ([`ensure`]),
//! reading Alembic's `alembic_version` table itself: applying is `filerouter db migrate`'s job
//! (the step a deploy runs before it starts the servers, as `alembic upgrade head` is in a
//! FastAPI deploy).
//!
//! Not here: the guest's side (`guest-python/sandbox/alembic_history.py`), or the SQL
//! migrations.

use std::path::{Path, PathBuf};

use crate::{
    db::{Database, DbError},
    regular_file::{self, FileError},
    sandbox::{ProjectError, Sandbox, SandboxError, Staged},
};

/// The history's folder, relative to the project.
pub const FOLDER: &str = "alembic";

/// Where the revisions are, inside [`FOLDER`].
const VERSIONS: &str = "versions";

/// Alembic's settings file, at the project's top; optional.
pub const INI: &str = "alembic.ini";

/// The other place Alembic reads its settings from (`[tool.alembic]`), copied when present.
const PYPROJECT: &str = "pyproject.toml";

/// At most this many files are staged or written back.
const MAX_FILES: usize = 10_000;

/// At most this many bytes in all.
const MAX_BYTES: u64 = 64 << 20;

/// What went wrong with the history.
#[derive(Debug, thiserror::Error)]
pub enum AlembicError {
    #[error("{FOLDER}/: {0}")]
    Folder(String),
    #[error(transparent)]
    Read(#[from] FileError),
    #[error(
        "{INI}: script_location = {0}: filerouter runs the history in the project's {FOLDER}/ folder (the one `alembic init alembic` makes); move it there and set script_location = %(here)s/{FOLDER}"
    )]
    Location(String),
    #[error("staging the history for the sandbox: {0}")]
    Stage(std::io::Error),
    /// A command Alembic refused (an unknown revision, a bad argument): what it printed.
    #[error("alembic {command}: {output}")]
    Refused { command: String, output: String },
    /// `env.py` or a revision raised.
    #[error("{}{}: {}: {}", .0.file.as_deref().unwrap_or("alembic/env.py"), .0.line.map(|l| format!(":{l}")).unwrap_or_default(), .0.kind, .0.message)]
    Raised(Box<ProjectError>),
    #[error("the sandbox: {0}")]
    Sandbox(SandboxError),
    #[error("the guest's answer: {0}")]
    Answer(String),
    #[error(
        "the database is not at the build's Alembic heads (it is at {}, the history's heads are {}): run `filerouter db migrate` from the project folder against this database, then start again",
        list(.at), list(.heads)
    )]
    Behind { at: Vec<String>, heads: Vec<String> },
    #[error("the database: {0}")]
    Database(#[from] DbError),
}

impl From<SandboxError> for AlembicError {
    fn from(error: SandboxError) -> Self {
        match error {
            SandboxError::Project(error) => AlembicError::Raised(error),
            other => AlembicError::Sandbox(other),
        }
    }
}

fn list(revisions: &[String]) -> String {
    if revisions.is_empty() {
        "none".into()
    } else {
        revisions.join(", ")
    }
}

/// What a run of Alembic answered.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Outcome {
    /// What Alembic (and `env.py`) printed.
    pub output: String,
    /// 0, or the exit status of a command Alembic refused.
    pub status: i32,
    /// The history's heads.
    pub heads: Vec<String>,
    /// The revisions the database is at (empty when not asked for, or none applied).
    pub current: Vec<String>,
}

impl Outcome {
    /// Whether the database is at every head and nowhere else.
    pub fn is_current(&self) -> bool {
        same(&self.current, &self.heads)
    }
}

fn same(a: &[String], b: &[String]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}

/// The history's files, as read from the project: (path relative to it, bytes).
#[derive(Debug, Clone, Default)]
pub struct History {
    files: Vec<(String, Vec<u8>)>,
}

impl History {
    /// The history of the project at `root`, or `None` when it has none (no `alembic/env.py`).
    /// Blocking.
    pub fn read(root: &Path) -> Result<Option<History>, AlembicError> {
        if !root.join(FOLDER).join("env.py").exists() {
            return Ok(None);
        }
        let mut history = History::read_any(root)?;
        history.check_location()?;
        // `env.py` itself is read as every other file is: a link out of the project, a FIFO
        // or a giant is refused with its name.
        if !history.files.iter().any(|(p, _)| p == "alembic/env.py") {
            return Ok(None);
        }
        history.files.sort();
        Ok(Some(history))
    }

    /// What the project has of a history so far (perhaps nothing: `db alembic init`).
    fn read_any(root: &Path) -> Result<History, AlembicError> {
        let mut history = History::default();
        let mut total = 0u64;
        let mut add = |rel: String, path: &Path| -> Result<(), AlembicError> {
            let bytes = regular_file::read_inside(path, root, regular_file::MAX_SOURCE_BYTES)?;
            total += bytes.len() as u64;
            if total > MAX_BYTES || history.files.len() >= MAX_FILES {
                return Err(AlembicError::Folder(format!(
                    "more than {MAX_FILES} files or {} MB",
                    MAX_BYTES >> 20
                )));
            }
            history.files.push((rel, bytes));
            Ok(())
        };
        for name in [INI, PYPROJECT] {
            let path = root.join(name);
            if path.exists() {
                add(name.into(), &path)?;
            }
        }
        let mut stack = vec![(root.join(FOLDER), FOLDER.to_string())];
        while let Some((dir, rel)) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && rel == FOLDER => continue,
                Err(e) => return Err(AlembicError::Folder(format!("{rel}: {e}"))),
            };
            for entry in entries {
                let entry = entry.map_err(|e| AlembicError::Folder(format!("{rel}: {e}")))?;
                let name = entry.file_name().to_string_lossy().to_string();
                if name.starts_with('.') || name == "__pycache__" || name.ends_with(".pyc") {
                    continue;
                }
                let path = entry.path();
                let child = format!("{rel}/{name}");
                let kind = entry
                    .file_type()
                    .map_err(|e| AlembicError::Folder(format!("{child}: {e}")))?;
                if kind.is_dir() {
                    stack.push((path, child));
                } else {
                    add(child, &path)?;
                }
            }
        }
        Ok(history)
    }

    /// Refuse an `alembic.ini` whose `script_location` is not the `alembic/` folder.
    fn check_location(&self) -> Result<(), AlembicError> {
        let Some((_, ini)) = self.files.iter().find(|(p, _)| p == INI) else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(ini);
        let mut section = "";
        for line in text.lines() {
            let line = line.trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.trim();
            } else if section == "alembic"
                && let Some((key, value)) = line.split_once(['=', ':'])
                && key.trim() == "script_location"
            {
                let value = value.trim();
                let folder = value
                    .strip_prefix("%(here)s/")
                    .or_else(|| value.strip_prefix("./"))
                    .unwrap_or(value)
                    .trim_end_matches('/');
                if folder != FOLDER {
                    return Err(AlembicError::Location(value.to_string()));
                }
            }
        }
        Ok(())
    }

    /// Copy the history into a new temporary folder, for the guest to see as `/project`.
    /// Blocking.
    pub fn stage(&self) -> Result<tempfile::TempDir, AlembicError> {
        let dir = tempfile::Builder::new()
            .prefix("filerouter-alembic-")
            .tempdir()
            .map_err(AlembicError::Stage)?;
        // `versions/` may be empty (`alembic init` makes it so), and a file list has no
        // empty folders: Alembic refuses a history without it. (Without a history, nothing:
        // `init` refuses a folder that is there.)
        let prefix = format!("{FOLDER}/");
        if self.files.iter().any(|(p, _)| p.starts_with(&prefix)) {
            std::fs::create_dir_all(dir.path().join(FOLDER).join(VERSIONS))
                .map_err(AlembicError::Stage)?;
        }
        for (rel, bytes) in &self.files {
            let path = dir.path().join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(AlembicError::Stage)?;
            }
            std::fs::write(&path, bytes).map_err(AlembicError::Stage)?;
        }
        Ok(dir)
    }

    /// Its files: (path relative to the project, bytes), sorted.
    pub fn files(&self) -> &[(String, Vec<u8>)] {
        &self.files
    }

    /// The file at `rel`, if the history has it.
    fn file(&self, rel: &str) -> Option<&[u8]> {
        self.files
            .iter()
            .find(|(p, _)| p == rel)
            .map(|(_, b)| b.as_slice())
    }
}

/// Stage `history`, run Alembic's command line with `args` on it in `sandbox`, and parse what
/// the guest answered: the one way every caller runs Alembic. The staged folder is handed back
/// (it is removed when dropped) so that a `writable` run's files can be copied back.
async fn call(
    sandbox: &Sandbox,
    history: &History,
    args: Vec<String>,
    report_current: bool,
    writable: bool,
) -> Result<(Outcome, tempfile::TempDir), AlembicError> {
    let staged = {
        let history = history.clone();
        blocking(move || history.stage()).await?
    };
    let answer = sandbox
        .alembic(
            args,
            report_current,
            Staged {
                dir: staged.path().to_path_buf(),
                writable,
                at: "/project",
            },
        )
        .await?;
    let outcome = serde_json::from_str(&answer).map_err(|e| AlembicError::Answer(e.to_string()))?;
    Ok((outcome, staged))
}

/// Run Alembic with `args` on `history` (staged read-only) in `sandbox`; a command Alembic
/// refuses is an error.
async fn run(
    sandbox: &Sandbox,
    history: &History,
    args: Vec<String>,
    report_current: bool,
) -> Result<Outcome, AlembicError> {
    let command = args.first().cloned().unwrap_or_default();
    let (outcome, _) = call(sandbox, history, args, report_current, false).await?;
    if outcome.status != 0 {
        return Err(AlembicError::Refused {
            command,
            output: outcome.output.trim().to_string(),
        });
    }
    Ok(outcome)
}

async fn blocking<T: Send + 'static>(
    op: impl FnOnce() -> Result<T, AlembicError> + Send + 'static,
) -> Result<T, AlembicError> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| AlembicError::Folder(format!("reading the history panicked: {e}")))?
}

/// The history of the project at `root` (`None`: it has none), read off the async threads.
/// Read it once and hand it to [`upgrade`], [`status`] or [`heads`].
pub async fn read(root: &Path) -> Result<Option<History>, AlembicError> {
    let root = root.to_path_buf();
    blocking(move || History::read(&root)).await
}

/// Bring the database to `history`'s heads (`alembic upgrade heads`); `sandbox` must start its
/// instances from the built-in guest with the project's files (`dev`'s, before its snapshots;
/// `filerouter db`'s). What Alembic printed, and where the database ends up.
pub async fn upgrade(sandbox: &Sandbox, history: &History) -> Result<Outcome, AlembicError> {
    run(
        sandbox,
        history,
        vec!["upgrade".into(), "heads".into()],
        true,
    )
    .await
}

/// Where the database stands against `history`.
pub async fn status(sandbox: &Sandbox, history: &History) -> Result<Outcome, AlembicError> {
    run(sandbox, history, Vec::new(), true).await
}

/// The heads of `history`, for a build to record. Needs no database.
pub async fn heads(sandbox: &Sandbox, history: &History) -> Result<Vec<String>, AlembicError> {
    let outcome = run(sandbox, history, Vec::new(), false).await?;
    let mut heads = outcome.heads;
    heads.sort();
    Ok(heads)
}

/// `run`: refuse a database that is not at a build's `heads` (none recorded: the build has no
/// history, and nothing is checked). Reads Alembic's `alembic_version` table directly.
pub async fn ensure(db: &Database, heads: Option<&[String]>) -> Result<(), AlembicError> {
    let Some(heads) = heads else {
        return Ok(());
    };
    let at = crate::db::migrations::alembic_versions(db).await?;
    if same(&at, heads) {
        Ok(())
    } else {
        Err(AlembicError::Behind {
            at,
            heads: heads.to_vec(),
        })
    }
}

/// `filerouter db alembic ARGS`: run Alembic's command line on the project at `root` in a
/// writable copy of its history, then copy what the command wrote back into the project.
/// Returns what Alembic printed and the files written (relative to `root`).
pub async fn command(
    root: &Path,
    sandbox: &Sandbox,
    args: Vec<String>,
) -> Result<(Outcome, Vec<String>), AlembicError> {
    let history = {
        let root = root.to_path_buf();
        blocking(move || {
            let history = History::read_any(&root)?;
            history.check_location()?;
            Ok(history)
        })
        .await?
    };
    let (outcome, staged) = call(sandbox, &history, args, true, true).await?;
    let written = {
        let root = root.to_path_buf();
        blocking(move || write_back(&root, &history, staged.path())).await?
    };
    Ok((outcome, written))
}

/// Copy what a command wrote in the staged folder `staged` back into the project at `root`:
/// new or changed regular files of `alembic/`, and `alembic.ini`; nothing else, no links, no
/// more than the bounds. Returns their paths, relative to `root`. Blocking.
fn write_back(root: &Path, before: &History, staged: &Path) -> Result<Vec<String>, AlembicError> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    if staged.join(INI).is_file() {
        found.push((INI.into(), staged.join(INI)));
    }
    let mut stack = vec![(staged.join(FOLDER), FOLDER.to_string())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name == "__pycache__" || name.ends_with(".pyc") {
                continue;
            }
            let child = format!("{rel}/{name}");
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push((entry.path(), child));
            } else if kind.is_file() {
                found.push((child, entry.path()));
            }
            if found.len() > MAX_FILES {
                return Err(AlembicError::Folder(format!(
                    "the command left more than {MAX_FILES} files"
                )));
            }
        }
    }
    found.sort();
    let mut written = Vec::new();
    for (rel, path) in found {
        let bytes = regular_file::read(&path, regular_file::MAX_SOURCE_BYTES)?;
        if before.file(&rel) == Some(bytes.as_slice()) {
            continue;
        }
        let target = root.join(&rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| AlembicError::Folder(format!("{rel}: {e}")))?;
        }
        // A link in the project's folder is replaced, never followed out of it.
        if target
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            std::fs::remove_file(&target)
                .map_err(|e| AlembicError::Folder(format!("{rel}: {e}")))?;
        }
        std::fs::write(&target, &bytes).map_err(|e| AlembicError::Folder(format!("{rel}: {e}")))?;
        written.push(rel);
    }
    // An empty `versions/` (what `init` makes) too, which Alembic needs.
    let versions = Path::new(FOLDER).join(VERSIONS);
    if staged.join(&versions).is_dir() && root.join(FOLDER).is_dir() {
        std::fs::create_dir_all(root.join(&versions))
            .map_err(|e| AlembicError::Folder(format!("{}: {e}", versions.display())))?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(ini: &str) -> History {
        History {
            files: vec![(INI.into(), ini.as_bytes().to_vec())],
        }
    }

    #[test]
    fn the_script_location_must_be_the_alembic_folder() {
        for ok in [
            "[alembic]\nscript_location = %(here)s/alembic\n",
            "[alembic]\nscript_location = alembic\n",
            "[alembic]\nscript_location: ./alembic/\n",
            "[other]\nscript_location = elsewhere\n",
        ] {
            assert!(history(ok).check_location().is_ok(), "{ok}");
        }
        let refused = history("[alembic]\nscript_location = %(here)s/migrations\n")
            .check_location()
            .unwrap_err();
        assert!(
            refused.to_string().contains("%(here)s/migrations"),
            "{refused}"
        );
    }

    #[test]
    fn a_command_writes_back_new_and_changed_history_files_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("alembic/versions")).unwrap();
        std::fs::write(root.path().join("alembic/env.py"), "old").unwrap();
        std::fs::write(root.path().join("alembic/script.py.mako"), "same").unwrap();
        let history = History::read_any(root.path()).unwrap();
        let staged = history.stage().unwrap();
        let at = |rel: &str| staged.path().join(rel);
        std::fs::write(at("alembic/env.py"), "new").unwrap();
        std::fs::write(at("alembic/versions/1_posts.py"), "revision = '1'").unwrap();
        std::fs::create_dir_all(at("alembic/versions/__pycache__")).unwrap();
        std::fs::write(at("alembic/versions/__pycache__/1_posts.pyc"), "x").unwrap();
        // Outside the history: never copied back.
        std::fs::write(at("config.py"), "evil").unwrap();
        std::fs::create_dir_all(at("routes")).unwrap();
        std::fs::write(at("routes/x.py"), "evil").unwrap();
        let written = write_back(root.path(), &history, staged.path()).unwrap();
        assert_eq!(written, ["alembic/env.py", "alembic/versions/1_posts.py"]);
        let read = |rel: &str| std::fs::read_to_string(root.path().join(rel)).ok();
        assert_eq!(read("alembic/env.py").as_deref(), Some("new"));
        assert_eq!(read("alembic/script.py.mako").as_deref(), Some("same"));
        assert_eq!(read("config.py"), None);
        assert_eq!(read("routes/x.py"), None);
        assert!(!root.path().join("alembic/versions/__pycache__").exists());
    }

    #[test]
    fn current_means_at_every_head_in_any_order() {
        let outcome = Outcome {
            heads: vec!["b".into(), "a".into()],
            current: vec!["a".into(), "b".into()],
            ..Outcome::default()
        };
        assert!(outcome.is_current());
        let behind = Outcome {
            current: vec!["a".into()],
            ..outcome
        };
        assert!(!behind.is_current());
    }
}
