//! Scanning `routes/`: folder names become URL patterns, route files become routes.
//!
//! The rules are SPEC.md's and DECISIONS.md's: `routes/index.py` is `/`; elsewhere a folder's
//! `route.py` (or `index.py`) serves the folder's path; `[param]`, `[...param]`, `[[...param]]`
//! and `(group)` folders; folders starting with `_` or `.` are private and skipped. Conflicts
//! (two files for one URL, sibling dynamic folders with different names) are [`ScanError`]s
//! that name both files.
//!
//! A symbolic link to a folder is followed only if it leads to a folder inside `routes/` that
//! is not one of its own ancestors (no escape from the project, no loop); a link elsewhere is a
//! scan error. A route file must be a regular file (a FIFO named `route.py` is an error, so
//! nothing ever blocks opening it).

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{Pattern, Segment};

/// A route file found by the scanner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteFile {
    /// The file, relative to `routes/`, with `/` separators (`users/[id]/route.py`).
    pub file: String,
    /// The URL pattern its folder yields.
    pub pattern: Pattern,
}

/// A problem with the shape of the `routes/` tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error("routes/{first} and routes/{second} both map to {url}: keep one of them")]
    DuplicateRoute {
        url: String,
        first: String,
        second: String,
    },
    #[error(
        "routes/{first} and routes/{second} use different names for the same dynamic segment \
         ([{first_name}] and [{second_name}]): rename one folder so both use the same name"
    )]
    DynamicNameConflict {
        first: String,
        first_name: String,
        second: String,
        second_name: String,
    },
    #[error(
        "routes/{file}: a catch-all folder ([...{name}] or [[...{name}]]) must be the last segment of a path"
    )]
    CatchAllNotLast { file: String, name: String },
    #[error("routes/{folder}: invalid folder name: {reason}")]
    BadFolderName { folder: String, reason: String },
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error(
        "routes/{link}: a symbolic link to a folder outside routes/ (or to its own parent) is not followed"
    )]
    LinkOutside { link: String },
    #[error("routes/{file}: not a regular file")]
    NotRegular { file: String },
}

/// What a folder name contributes to the URL.
enum FolderKind {
    Segment(Segment),
    Group,
    Private,
}

fn classify(name: &str) -> Result<FolderKind, String> {
    if name.starts_with('_') || name.starts_with('.') {
        return Ok(FolderKind::Private);
    }
    if let Some(inner) = name
        .strip_prefix("[[...")
        .and_then(|n| n.strip_suffix("]]"))
    {
        return param_name(inner).map(|n| FolderKind::Segment(Segment::OptionalCatchAll(n)));
    }
    if let Some(inner) = name.strip_prefix("[...").and_then(|n| n.strip_suffix(']')) {
        return param_name(inner).map(|n| FolderKind::Segment(Segment::CatchAll(n)));
    }
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return param_name(inner).map(|n| FolderKind::Segment(Segment::Param(n)));
    }
    if name.starts_with('(') && name.ends_with(')') && name.len() > 2 {
        return Ok(FolderKind::Group);
    }
    if name.contains(['[', ']']) {
        return Err(
            "brackets are only allowed around a whole folder name ([id], [...rest], [[...rest]])"
                .into(),
        );
    }
    Ok(FolderKind::Segment(Segment::Static(name.to_string())))
}

fn param_name(inner: &str) -> Result<String, String> {
    let valid = !inner.is_empty()
        && inner.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !inner.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(inner.to_string())
    } else {
        Err(format!("'{inner}' is not a valid Python parameter name"))
    }
}

/// The outcome of a scan: every route file found and every problem found.
#[derive(Debug, Default)]
pub struct Scan {
    pub routes: Vec<RouteFile>,
    pub errors: Vec<ScanError>,
}

/// Scan the folder `routes_dir`. The result does not depend on the file system's order.
pub fn scan(routes_dir: &Path) -> Scan {
    let mut scan = Scan::default();
    let inside = fs::canonicalize(routes_dir).unwrap_or_else(|_| routes_dir.to_path_buf());
    walk(routes_dir, "", &mut Vec::new(), true, &mut scan, &inside);
    scan.routes.sort_by(|a, b| a.file.cmp(&b.file));
    scan
}

/// Whether the folder link at `link` may be followed: it leads inside `inside` and not to one
/// of the link's own ancestors.
pub fn followable(link: &Path, inside: &Path) -> bool {
    let (Ok(target), Some(parent)) = (fs::canonicalize(link), link.parent()) else {
        return false;
    };
    let parent = fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
    target.starts_with(inside) && !parent.starts_with(&target)
}

fn walk(
    dir: &Path,
    rel: &str,
    segments: &mut Vec<Segment>,
    root: bool,
    scan: &mut Scan,
    inside: &Path,
) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            scan.errors.push(ScanError::Io {
                path: dir.display().to_string(),
                reason: e.to_string(),
            });
            return;
        }
    };
    let mut folders: Vec<(String, PathBuf)> = Vec::new();
    let mut files: Vec<String> = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if kind.is_symlink() && path.is_dir() {
            // Private folders are skipped whatever they point at.
            if name.starts_with(['_', '.']) {
                continue;
            }
            if followable(&path, inside) {
                folders.push((name, path));
            } else {
                scan.errors.push(ScanError::LinkOutside { link: child });
            }
        } else if kind.is_dir() {
            folders.push((name, path));
        } else if name == "route.py" || name == "index.py" {
            // `is_file` follows a link and never opens: a FIFO cannot block it.
            if path.is_file() {
                files.push(name);
            } else if !(root && name == "route.py") {
                scan.errors.push(ScanError::NotRegular { file: child });
            }
        }
    }
    folders.sort();
    files.sort();

    let route_files: Vec<String> = files
        .iter()
        .map(|f| {
            if rel.is_empty() {
                f.clone()
            } else {
                format!("{rel}/{f}")
            }
        })
        .filter(|f| !root || f == "index.py")
        .collect();
    if let Some(catch_all) = segments
        .iter()
        .take(segments.len().saturating_sub(1))
        .find(|s| s.is_catch_all())
        && let Some(file) = route_files.first()
    {
        scan.errors.push(ScanError::CatchAllNotLast {
            file: file.clone(),
            name: catch_all.param_name().unwrap_or_default().to_string(),
        });
    } else {
        for file in route_files {
            scan.routes.push(RouteFile {
                file,
                pattern: Pattern(segments.clone()),
            });
        }
    }

    for (name, path) in folders {
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        match classify(&name) {
            Ok(FolderKind::Private) => {}
            Ok(FolderKind::Group) => walk(&path, &child_rel, segments, false, scan, inside),
            Ok(FolderKind::Segment(segment)) => {
                segments.push(segment);
                walk(&path, &child_rel, segments, false, scan, inside);
                segments.pop();
            }
            Err(reason) => scan.errors.push(ScanError::BadFolderName {
                folder: child_rel,
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "def GET(request):\n    return {}\n").unwrap();
    }

    fn patterns(scan: &Scan) -> Vec<(String, String)> {
        scan.routes
            .iter()
            .map(|r| (r.file.clone(), r.pattern.to_string()))
            .collect()
    }

    #[test]
    fn folder_names_become_patterns() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "index.py",
            "users/route.py",
            "users/[id]/route.py",
            "(admin)/settings/route.py",
            "docs-site/[...path]/route.py",
            "shop/[[...slug]]/route.py",
            "v1.2/status/route.py",
            "api/index.py",
            "_lib/route.py",
            ".hidden/route.py",
            "users/[id]/posts/[post_id]/route.py",
        ] {
            touch(root, f);
        }
        let scan = scan(root);
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);
        assert_eq!(
            patterns(&scan),
            vec![
                ("(admin)/settings/route.py".into(), "/settings".into()),
                ("api/index.py".into(), "/api".into()),
                (
                    "docs-site/[...path]/route.py".into(),
                    "/docs-site/{path}".into()
                ),
                ("index.py".into(), "/".into()),
                ("shop/[[...slug]]/route.py".into(), "/shop/{slug}".into()),
                (
                    "users/[id]/posts/[post_id]/route.py".into(),
                    "/users/{id}/posts/{post_id}".into()
                ),
                ("users/[id]/route.py".into(), "/users/{id}".into()),
                ("users/route.py".into(), "/users".into()),
                ("v1.2/status/route.py".into(), "/v1.2/status".into()),
            ]
        );
    }

    #[test]
    fn a_root_route_py_is_not_a_route() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "route.py");
        assert!(scan(dir.path()).routes.is_empty());
    }

    #[test]
    fn bad_bracket_names_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "a[b]/route.py");
        touch(dir.path(), "[1x]/route.py");
        let scan = scan(dir.path());
        assert_eq!(scan.errors.len(), 2, "{:?}", scan.errors);
    }

    #[test]
    fn catch_all_must_be_last() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "[...p]/x/route.py");
        let scan = scan(dir.path());
        assert!(matches!(
            scan.errors[..],
            [ScanError::CatchAllNotLast { .. }]
        ));
    }

    #[test]
    fn links_out_of_routes_and_loops_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "real/route.py");
        touch(root, "_lib/helper.py");
        std::os::unix::fs::symlink("/usr", root.join("usr")).unwrap();
        std::os::unix::fs::symlink("/", root.join("_lib/root")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
        std::os::unix::fs::symlink("..", root.join("real/up")).unwrap();
        let scan = scan(root);
        assert_eq!(
            patterns(&scan),
            vec![
                ("alias/route.py".into(), "/alias".into()),
                ("real/route.py".into(), "/real".into()),
            ]
        );
        let mut errors: Vec<String> = scan.errors.iter().map(|e| e.to_string()).collect();
        errors.sort();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors.iter().any(|e| e.starts_with("routes/usr:")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.starts_with("routes/real/up:")),
            "{errors:?}"
        );
    }
}
