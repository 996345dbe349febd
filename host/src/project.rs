//! A project as it is served: the route table, what each route file offers, scan errors.
//!
//! [`Project::load`] scans `routes/` (names only) and asks the guest to inspect every route
//! file, in fresh sandbox instances, to learn which HTTP methods it defines. A file that fails
//! to import affects only its own routes. When reloading, files whose size and modification
//! time did not change keep their earlier inspection.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::SystemTime,
};

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

/// One route: a route file and what the guest found in it.
#[derive(Debug, Clone)]
pub struct Route {
    /// Relative to `routes/` (`users/[id]/route.py`).
    pub file: String,
    pub pattern: Pattern,
    pub handlers: Handlers,
    stamp: Option<(SystemTime, u64)>,
}

impl Route {
    /// Whether the route file defines a handler named `method`.
    pub fn handler(&self, method: &str) -> Option<&HandlerInfo> {
        self.handlers
            .as_ref()
            .ok()?
            .iter()
            .find(|h| h.method == method)
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

/// The project's optional root Python files: `middleware.py`, `docs.py`, `not-found.py`.
///
/// The sandbox sees no root files: in development the host reads them and passes their source
/// with each call; in production they were baked into the guest and only their names are kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RootFiles {
    present: Vec<String>,
    sources: Vec<(String, String)>,
}

impl RootFiles {
    /// The names of the root files a project may have.
    pub const NAMES: [&'static str; 3] = ["middleware.py", "docs.py", "not-found.py"];

    /// Read the root files of the project at `root` (blocking: call it off the async threads).
    /// A file that cannot be read (not UTF-8 text, too large, a FIFO) is passed on as a source
    /// that raises an `ImportError` saying why, so that the guest reports it.
    pub fn read(root: &Path) -> RootFiles {
        let mut files = RootFiles::default();
        for name in Self::NAMES {
            let path = root.join(name);
            if !path.exists() {
                continue;
            }
            let source = regular_file::read_to_string(&path, regular_file::MAX_SOURCE_BYTES)
                .unwrap_or_else(|e| {
                    format!(
                        "raise ImportError({:?})\n",
                        format!("cannot read {name}: {e}")
                    )
                });
            files.present.push(name.to_string());
            files.sources.push((name.to_string(), source));
        }
        files
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

    /// Scan and inspect the project at `root`, reusing `previous`'s inspections of unchanged files.
    pub async fn load(root: &Path, sandbox: &Sandbox, previous: Option<&Project>) -> Project {
        let routes_dir = Self::routes_dir(root);
        // The scan and the root files touch the file system: off the async threads.
        let (scan, root_files) = {
            let (routes_dir, root) = (routes_dir.clone(), root.to_path_buf());
            tokio::task::spawn_blocking(move || (scan::scan(&routes_dir), RootFiles::read(&root)))
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
        for (index, found) in scan.routes.iter().enumerate() {
            let stamp = stamp(&routes_dir.join(&found.file));
            if let Some(old) = known.get(found.file.as_str())
                && stamp.is_some()
                && old.stamp == stamp
            {
                routes[index] = Some(Route {
                    pattern: found.pattern.clone(),
                    ..(*old).clone()
                });
                continue;
            }
            let sandbox = sandbox.clone();
            let file = found.file.clone();
            let pattern = found.pattern.clone();
            inspections.spawn(async move {
                let handlers = match sandbox.inspect_route(&file).await {
                    Ok(handlers) => Ok(handlers),
                    Err(SandboxError::Project(error)) => Err(*error),
                    Err(other) => Err(sandbox_failure(&file, other)),
                };
                (
                    index,
                    Route {
                        file,
                        pattern,
                        handlers,
                        stamp,
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
                    stamp: None,
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
                stamp: None,
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

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
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
