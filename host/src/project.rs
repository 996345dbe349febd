//! A project as it is served: the route table, what each route file offers, scan errors.
//!
//! [`Project::load`] scans `routes/` (names only) and asks the guest to inspect every route
//! file, in fresh sandbox instances, to learn which HTTP methods it defines, whether its path
//! ends with `/` (`TRAILING_SLASH = True`) and which project files its import loaded (helpers
//! under `routes/_lib/`, say). A file that fails to import affects only its own routes. When
//! reloading, a route keeps its earlier inspection only if it succeeded and neither the route
//! file nor any file its import loaded changed size or modification time since; a route that
//! failed is inspected again at every reload, so it recovers whatever the fix was (a helper
//! repaired, a missing module created). Not here: watching files (`crate::reload`) and
//! matching request paths (`crate::routes`).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use anyhow::Context;
use tokio::task::JoinSet;

use crate::{
    cache::CachedRoute,
    regular_file,
    routes::{
        Pattern,
        scan::{self, RouteFile, ScanError},
        table::RouteTable,
    },
    sandbox::{HandlerInfo, ProjectError, Sandbox, SandboxError},
};

/// The methods a route file serves, or why it serves none.
pub type Handlers = Result<Vec<HandlerInfo>, ProjectError>;

/// A file's modification time and size: what tells an edit.
type Stamp = (SystemTime, u64);

/// The most project files one route's import is remembered to have loaded; a route that
/// loaded more is inspected again at every reload.
const MAX_IMPORTS: usize = 4096;

/// How recent a modification may be, relative to the start of an inspection, for its stamp
/// to be trusted: a file written while the guest imported it (or within the file system's
/// timestamp granularity of that) may have been read before the write.
const SETTLE: Duration = Duration::from_secs(1);

/// One route: a route file and what the guest found in it.
#[derive(Debug, Clone)]
pub struct Route {
    /// Relative to `routes/` (`users/[id]/route.py`).
    pub file: String,
    pub pattern: Pattern,
    pub handlers: Handlers,
    /// Whether the route file sets `TRAILING_SLASH = True`: its canonical path ends with `/`.
    pub trailing_slash: bool,
    stamp: Option<Stamp>,
    /// The other project files its import loaded, with their stamps when it was inspected.
    imports: Vec<Import>,
}

/// A project file a route's import loaded.
#[derive(Debug, Clone, PartialEq)]
struct Import {
    /// Relative to the project root (`routes/_lib/db.py`).
    file: String,
    /// `None` when unknown or too recent to trust: the route is then inspected again.
    stamp: Option<Stamp>,
}

impl Route {
    /// The route's path as clients, `/docs` and `/openapi.json` see it: `/users/{id}`, or
    /// `/users/{id}/` for a route that sets `TRAILING_SLASH = True`.
    pub fn path(&self) -> String {
        self.pattern.path(self.trailing_slash)
    }

    /// Whether the inspection made earlier still holds for a route file now stamped `stamp`
    /// in the project at `root`: it succeeded, and neither the file nor its imports changed.
    fn still_holds(&self, stamp: Option<Stamp>, root: &Path) -> bool {
        self.handlers.is_ok()
            && stamp.is_some()
            && self.stamp == stamp
            && self.imports.iter().all(|import| {
                import.stamp.is_some() && stamp_of(&root.join(&import.file)) == import.stamp
            })
    }

    /// Whether the route file defines a handler named `method`.
    pub fn handler(&self, method: &str) -> Option<&HandlerInfo> {
        self.handlers
            .as_ref()
            .ok()?
            .iter()
            .find(|h| h.method == method)
    }

    /// Whether the route file defines an HTTP handler (not only `WEBSOCKET`).
    pub fn serves_http(&self) -> bool {
        self.handlers
            .as_ref()
            .is_ok_and(|handlers| handlers.iter().any(|h| h.method != "WEBSOCKET"))
    }

    /// The value of an `Allow` header for this route.
    pub fn allow(&self) -> String {
        let mut allowed: Vec<&str> = Vec::new();
        for method in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
            let defined = self.handler(method).is_some();
            let automatic = match method {
                "HEAD" => self.handler("GET").is_some(),
                "OPTIONS" => true,
                _ => false,
            };
            if defined || automatic {
                allowed.push(method);
            }
        }
        allowed.join(", ")
    }
}

/// The project's optional root Python files: `middleware.py`, `docs.py`, `not-found.py`,
/// `startup.py` (the start-up hook, `crate::startup`).
///
/// The sandbox sees no root files: in development the host reads them and passes their source
/// with each call; in production they were baked into the guest and only their names are kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RootFiles {
    present: Vec<String>,
    sources: Vec<(String, String)>,
}

/// The source of the project file at `path` (`shown` in messages), or, when it cannot be read
/// (not UTF-8 text, too large, a FIFO), a source that raises an `ImportError` saying why, so
/// that the guest reports it. Blocking.
fn source_of(path: &Path, shown: &str) -> String {
    regular_file::read_to_string(path, regular_file::MAX_SOURCE_BYTES).unwrap_or_else(|e| {
        format!(
            "raise ImportError({:?})\n",
            format!("cannot read {shown}: {e}")
        )
    })
}

impl RootFiles {
    /// The names of the root files a project may have.
    pub const NAMES: [&'static str; 4] = ["middleware.py", "docs.py", "not-found.py", "startup.py"];

    /// Read the root files of the project at `root` (blocking: call it off the async threads);
    /// one that cannot be read becomes a source that says why ([`source_of`]).
    pub fn read(root: &Path) -> RootFiles {
        let mut files = RootFiles::default();
        for name in Self::NAMES {
            let path = root.join(name);
            if !path.exists() {
                continue;
            }
            let source = source_of(&path, name);
            files.present.push(name.to_string());
            files.sources.push((name.to_string(), source));
        }
        files
    }

    /// The test-only overrides file, read as [`RootFiles::read`] reads the others and sent
    /// with each call under `overrides:` and its path (the guest's `project.load_overrides`).
    fn add_overrides(&mut self, overrides: &DependencyOverrides) {
        let source = source_of(&overrides.path, &overrides.shown);
        self.sources
            .push((format!("overrides:{}", overrides.shown), source));
    }

    /// The `.py` files under `routes/` (path relative to it, source), sent with each call too
    /// (named `routes:` and the path): in `dev`, an instance that starts from the snapshot
    /// of the packages alone cannot open `/routes` (`crate::imported`), and imports them so.
    fn add_route_sources(&mut self, files: &[(String, String)]) {
        self.sources.extend(
            files
                .iter()
                .map(|(path, source)| (format!("{ROUTE_SOURCE_PREFIX}{path}"), source.clone())),
        );
    }

    /// The route files [`RootFiles::add_route_sources`] added, as it was given them.
    pub fn route_sources(&self) -> Vec<(String, String)> {
        self.sources
            .iter()
            .filter_map(|(name, source)| {
                let path = name.strip_prefix(ROUTE_SOURCE_PREFIX)?;
                Some((path.to_string(), source.clone()))
            })
            .collect()
    }

    /// These root files without the route files: for calls whose instance has the routes
    /// imported already (a snapshot of the project).
    pub fn without_route_sources(&self) -> RootFiles {
        RootFiles {
            present: self.present.clone(),
            sources: self
                .sources
                .iter()
                .filter(|(name, _)| !name.starts_with(ROUTE_SOURCE_PREFIX))
                .cloned()
                .collect(),
        }
    }

    /// The root files a snapshot imports (`middleware.py`, ...), as (name, source): neither
    /// the route files nor the test-only overrides sent with each call.
    pub fn to_bake(&self) -> Vec<(String, String)> {
        self.sources
            .iter()
            .filter(|(name, _)| Self::NAMES.contains(&name.as_str()))
            .cloned()
            .collect()
    }

    /// Root files that were baked into the guest: names only.
    pub fn baked(names: &[String]) -> RootFiles {
        RootFiles {
            present: names.to_vec(),
            sources: Vec::new(),
        }
    }

    /// Whether the project has the root file `name`.
    pub fn has(&self, name: &str) -> bool {
        self.present.iter().any(|n| n == name)
    }

    /// The names present.
    pub fn names(&self) -> &[String] {
        &self.present
    }

    /// What the guest is sent with each call.
    pub fn sources(&self) -> &[(String, String)] {
        &self.sources
    }
}

/// How a route file sent with a call is named among the root files (the guest's
/// `project.ROUTE_SOURCE_PREFIX`).
const ROUTE_SOURCE_PREFIX: &str = "routes:";

/// `filerouter dev --overrides FILE`: a Python file whose `dependency_overrides` replace the
/// project's dependencies in every request, as FastAPI's `app.dependency_overrides` does in
/// tests (the TestClient's `dependency_overrides=`). Only `dev` takes one: `build` and `run`
/// never send it, so production code cannot be changed this way.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyOverrides {
    path: PathBuf,
    /// The path in messages and tracebacks: relative to the project when inside it.
    shown: String,
}

impl std::fmt::Display for DependencyOverrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl DependencyOverrides {
    /// The overrides file `file` (relative to the current folder) of the project at `root`.
    pub fn new(root: &Path, file: &Path) -> std::io::Result<DependencyOverrides> {
        let path = file.canonicalize()?;
        if !path.is_file() {
            return Err(std::io::Error::other(format!(
                "{} is not a file",
                file.display()
            )));
        }
        let shown = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        Ok(DependencyOverrides { path, shown })
    }
}

/// A loaded project.
#[derive(Debug, Clone)]
pub struct Project {
    pub routes: Vec<Route>,
    pub table: RouteTable,
    pub scan_errors: Vec<ScanError>,
    pub root_files: RootFiles,
}

impl Project {
    /// The project's `routes/` folder.
    pub fn routes_dir(root: &Path) -> PathBuf {
        root.join("routes")
    }

    /// Scan and inspect the project at `root`, reusing `previous`'s inspections of routes
    /// whose files (and the files they imported) did not change.
    /// `overrides`: the test-only file of `dev --overrides`, sent with the root files.
    pub async fn load(
        root: &Path,
        sandbox: &Sandbox,
        previous: Option<&Project>,
        overrides: Option<&DependencyOverrides>,
    ) -> Project {
        let routes_dir = Self::routes_dir(root);
        // The scan and the root files touch the file system: off the async threads.
        let (scan, root_files) = {
            let (routes_dir, root) = (routes_dir.clone(), root.to_path_buf());
            let overrides = overrides.cloned();
            tokio::task::spawn_blocking(move || {
                let mut root_files = RootFiles::read(&root);
                if let Some(overrides) = &overrides {
                    root_files.add_overrides(overrides);
                }
                // A file that cannot be read is reported by the inspection that imports it.
                if let Ok(files) = route_sources(&routes_dir) {
                    root_files.add_route_sources(&files);
                }
                (scan::scan(&routes_dir), root_files)
            })
            .await
            .unwrap_or_else(|e| {
                let mut failed = scan::Scan::default();
                failed.errors.push(ScanError::Io {
                    path: "routes/".into(),
                    reason: format!("the scan failed: {e}"),
                });
                (failed, RootFiles::default())
            })
        };
        let (table, mut table_errors) = RouteTable::build(&scan.routes);
        let mut scan_errors = scan.errors;
        scan_errors.append(&mut table_errors);

        let known: HashMap<&str, &Route> = previous
            .map(|p| p.routes.iter().map(|r| (r.file.as_str(), r)).collect())
            .unwrap_or_default();
        let mut routes: Vec<Option<Route>> = vec![None; scan.routes.len()];
        let mut inspections = JoinSet::new();
        let files = std::sync::Arc::new(root_files.route_sources());
        for (index, found) in scan.routes.iter().enumerate() {
            let stamp = stamp_of(&routes_dir.join(&found.file));
            if let Some(old) = known.get(found.file.as_str())
                && old.still_holds(stamp, root)
            {
                routes[index] = Some(Route {
                    pattern: found.pattern.clone(),
                    ..(*old).clone()
                });
                continue;
            }
            let sandbox = sandbox.clone();
            let root = root.to_path_buf();
            let file = found.file.clone();
            let pattern = found.pattern.clone();
            let files = files.clone();
            inspections.spawn(async move {
                let started = SystemTime::now();
                let inspected = sandbox.inspect_route(&file, &files).await;
                let (handlers, trailing_slash, imports) = match inspected {
                    Ok(inspection) => (
                        inspection.handlers,
                        inspection.trailing_slash,
                        imports(&root, &file, inspection.imports, started),
                    ),
                    Err(SandboxError::Project(error)) => (Err(*error), false, Vec::new()),
                    Err(other) => (Err(sandbox_failure(&file, other)), false, Vec::new()),
                };
                (
                    index,
                    Route {
                        file,
                        pattern,
                        handlers,
                        trailing_slash,
                        stamp,
                        imports,
                    },
                )
            });
        }
        while let Some(joined) = inspections.join_next().await {
            match joined {
                Ok((index, route)) => routes[index] = Some(route),
                Err(e) => tracing::error!("route inspection task failed: {e}"),
            }
        }
        let routes = routes
            .into_iter()
            .zip(&scan.routes)
            .map(|(route, found)| {
                route.unwrap_or_else(|| Route {
                    file: found.file.clone(),
                    pattern: found.pattern.clone(),
                    handlers: Err(sandbox_failure(&found.file, "inspection did not finish")),
                    trailing_slash: false,
                    stamp: None,
                    imports: Vec::new(),
                })
            })
            .collect();
        Project {
            routes,
            table,
            scan_errors,
            root_files,
        }
    }
}

impl Project {
    /// The project as a build cache recorded it: no files are read and no guest is asked.
    pub fn from_cache(cached: &[CachedRoute], root_files: &[String]) -> Project {
        let files: Vec<RouteFile> = cached
            .iter()
            .map(|r| RouteFile {
                file: r.file.clone(),
                pattern: r.pattern.clone(),
            })
            .collect();
        let (table, scan_errors) = RouteTable::build(&files);
        let routes = cached
            .iter()
            .map(|r| Route {
                file: r.file.clone(),
                pattern: r.pattern.clone(),
                handlers: Ok(r.handlers.clone()),
                trailing_slash: r.trailing_slash,
                stamp: None,
                imports: Vec::new(),
            })
            .collect();
        Project {
            routes,
            table,
            scan_errors,
            root_files: RootFiles::baked(root_files),
        }
    }
}

fn stamp_of(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The files the guest says route `file`'s import loaded, stamped now. Only paths inside
/// `routes/` are kept (the guest's list is only ever stat-ed, never opened); a file modified
/// around or after `started` gets no stamp, so the route is inspected again next time.
fn imports(root: &Path, file: &str, reported: Vec<String>, started: SystemTime) -> Vec<Import> {
    let own = format!("routes/{file}");
    let inside = |path: &str| {
        path.strip_prefix("routes/").is_some_and(|rest| {
            rest.split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..")
        }) && !path.contains('\0')
    };
    let mut kept: Vec<Import> = reported
        .into_iter()
        .filter(|path| inside(path) && *path != own)
        .take(MAX_IMPORTS)
        .map(|path| {
            let stamp =
                stamp_of(&root.join(&path)).filter(|(modified, _)| *modified + SETTLE < started);
            Import { file: path, stamp }
        })
        .collect();
    if kept.len() == MAX_IMPORTS {
        // Possibly more than remembered: never trust the inspection for long.
        kept.push(Import {
            file: own,
            stamp: None,
        });
    }
    kept
}

/// A project error for a route file that the sandbox could not inspect at all.
fn sandbox_failure(file: &str, reason: impl std::fmt::Display) -> ProjectError {
    ProjectError {
        kind: "SandboxError".into(),
        message: format!("could not inspect routes/{file}: {reason}"),
        file: Some(format!("routes/{file}")),
        line: None,
        frames: Vec::new(),
        traceback: String::new(),
        suggestions: Vec::new(),
    }
}

/// Every `.py` file under `routes/` (route files and the helpers they import), as (path
/// relative to `routes/`, text), sorted by path: what a build or `dev`'s snapshot imports.
/// Only regular files of at most [`regular_file::MAX_SOURCE_BYTES`] are read; folder links
/// are followed only inside `routes/` (as the scanner does). Blocking.
pub fn route_sources(routes_dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let inside = std::fs::canonicalize(routes_dir).unwrap_or_else(|_| routes_dir.to_path_buf());
    let mut stack = vec![(routes_dir.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let path = entry.path();
            let rel_name = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            if path.is_dir() {
                let follow = !is_link || scan::followable(&path, &inside);
                if follow && name != "__pycache__" && !name.starts_with('.') {
                    stack.push((path, rel_name));
                }
            } else if name.ends_with(".py") {
                let source = regular_file::read_to_string(&path, regular_file::MAX_SOURCE_BYTES)
                    .with_context(|| format!("routes/{rel_name}: cannot read it"))?;
                out.push((rel_name, source));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_inside_routes_are_kept_and_recent_ones_are_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("routes/_lib")).unwrap();
        std::fs::write(root.join("routes/_lib/old.py"), "").unwrap();
        std::fs::write(root.join("routes/_lib/new.py"), "").unwrap();
        let old = std::fs::File::options()
            .write(true)
            .open(root.join("routes/_lib/old.py"))
            .unwrap();
        old.set_modified(SystemTime::now() - Duration::from_secs(60))
            .unwrap();
        let reported = [
            "routes/_lib/old.py",
            "routes/_lib/new.py",
            "routes/a/route.py",
            "routes/../config.py",
            "/etc/passwd",
            "config.py",
            "routes//x.py",
        ]
        .map(String::from)
        .to_vec();
        let kept = imports(root, "a/route.py", reported, SystemTime::now());
        let files: Vec<(&str, bool)> = kept
            .iter()
            .map(|i| (i.file.as_str(), i.stamp.is_some()))
            .collect();
        assert_eq!(
            files,
            [("routes/_lib/old.py", true), ("routes/_lib/new.py", false)]
        );
    }
}
