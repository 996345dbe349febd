//! Type checking route code (issue 24, point 5): the guest's `filerouter` package is typed
//! (inline annotations and `py.typed`), `Depends`, `Query`, `Body`, ... are functions that return
//! `Any` for checkers as FastAPI's are, and route code that uses them passes `mypy --strict` and
//! pyright, set up as the README's "Type checking" says: a `typings/` folder holding a copy of
//! `guest-python/filerouter/` and what `filerouter plugins stubs` writes, with `routes/` on the
//! path too (for `_lib` imports).
//!
//! - every example project is clean under `mypy --strict` and pyright (standard mode), and so
//!   is the package itself under `mypy --strict`;
//! - a route file that uses the whole API, `conn: Database = Depends(get_db)` included, is clean
//!   under `mypy --strict` and pyright strict, while mistakes in one (an `int` from `Query(3)`
//!   returned as a `str`, an option `Query` does not take) are reported at their lines.
//!
//! mypy comes from `tests/.venv` (tests/openapi/requirements.txt), pyright from `tests/browser`
//! (package.json). Without them these tests skip loudly, and fail in CI
//! (`FILEROUTER_REQUIRE_BROWSER=1`).

use crate::support;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use support::{
    Project, copy_all, run,
    tools::{missing, python_venv, run_tool, workspace},
};

/// The example projects route code is checked in (`bookshop-fastapi` and `blog/fastapi_app.py`
/// are FastAPI apps, the originals of two ports, not route code).
const EXAMPLES: [&str; 5] = ["hello", "api", "blog", "bookshop", "plugins-demo"];

/// The Python version of the sandbox's interpreter, which the checkers assume.
const PYTHON: &str = "3.14";

/// A route file that uses filerouter's API as a FastAPI user would: every line must check.
const WELL_TYPED: &str = r#"
    """Every marker, a dependency by type, and the request's and responses' types."""

    import sqlite3
    from collections.abc import Iterator
    from typing import Annotated, Any

    from filerouter import (
        Body, Cookie, Depends, Field, File, Form, Header, HTTPBasic, HTTPBasicCredentials,
        HTTPException, JSONResponse, OAuth2PasswordBearer, OAuth2PasswordRequestForm, Path, Query,
        Request, Response, Security, SecurityScopes, UploadFile, db, kv, route,
    )
    from filerouter.plugins import PluginError
    from filerouter.security import APIKeyQuery, HTTPAuthorizationCredentials, HTTPBearer


    class Database:
        def count(self) -> int:
            return 0


    def get_db() -> Iterator[Database]:
        yield Database()


    def get_conn() -> Iterator[sqlite3.Connection]:
        conn = db.connect()
        try:
            yield conn
        finally:
            conn.close()


    Price = Annotated[float, Field(gt=0)]


    async def POST(
        request: Request,
        item_id: int = Path(ge=1),
        n: int = Query(3, ge=0, le=10),
        tags: Annotated[list[str], Query(max_length=5)] = [],
        user_agent: str | None = Header(None),
        session: str = Cookie("anonymous"),
        price: Price = Body(embed=True),
        conn: Database = Depends(get_db),
        sql: sqlite3.Connection = Depends(get_conn, use_cache=False),
    ) -> dict[str, Any]:
        token: str | None = request.headers.get("authorization")
        page: str = request.query_params.get("page", "1")
        body: Any = await request.json()
        request.state.user = "demo"
        hits: int = kv.incr(f"hits:{request.client}", ttl=60)
        if conn.count() > n:
            raise HTTPException(409, "too many", headers={"Retry-After": "1"})
        try:
            row = sql.execute("SELECT 1").fetchone()
        except db.LimitExceeded:
            row = None
        return {"id": item_id, "tags": tags, "token": token, "page": page, "body": body,
                "hits": hits, "user": request.state.user, "row": row, "price": price,
                "agent": user_agent, "session": session, "plugin_error": PluginError}


    oauth2_scheme = OAuth2PasswordBearer(tokenUrl="token", scopes={"items:read": "Read items"})
    basic = HTTPBasic(realm="shop")
    bearer = HTTPBearer(auto_error=False)
    api_key = APIKeyQuery(name="api_key")


    def scoped(scopes: SecurityScopes, token: Annotated[str, Depends(oauth2_scheme)]) -> list[str]:
        return [*scopes.scopes, token, scopes.scope_str]


    @route(tags=["items"], summary="Read", responses={404: {"description": "Missing"}, "default": {}},
           deprecated=True, operation_id="read_item", response_description="The item")
    def GET(
        request: Request,
        form: Annotated[OAuth2PasswordRequestForm, Depends()],
        creds: HTTPBasicCredentials = Depends(basic),
        maybe: HTTPAuthorizationCredentials | None = Depends(bearer),
        key: str = Depends(api_key),
        needed: list[str] = Security(scoped, scopes=["items:read"]),
    ) -> dict[str, Any]:
        return {"user": form.username, "scopes": form.scopes, "basic": creds.password, "key": key,
                "bearer": maybe.credentials if maybe else None, "needed": needed}


    async def PUT(request: Request, name: str = Form(min_length=1), upload: UploadFile = File()) -> Response:
        data: bytes = await upload.read()
        form = await request.form()
        field = form.get("name")
        if isinstance(field, UploadFile):
            raise HTTPException(422)
        return JSONResponse({"name": name, "size": len(data), "field": field}, status_code=201)
"#;

/// Mistakes a checker must report: `(line, what mypy says, what pyright says)` for each marked line.
const BADLY_TYPED: &str = r#"
    from filerouter import Query, Request, route


    def GET(request: Request, n: int = Query(3)) -> str:
        return n  # mistake: return


    def DELETE(request: Request, n: int = Query(3, minimum=1)) -> int:  # mistake: option
        return n


    @route(tag=["items"])  # mistake: route
    def PATCH(request: Request) -> None:
        return None
"#;

/// A `# mistake: NAME` line of [`BADLY_TYPED`], and what each checker says about it.
struct Mistake {
    name: &'static str,
    mypy: &'static str,
    pyright: &'static str,
}

const MISTAKES: [Mistake; 3] = [
    Mistake {
        name: "return",
        mypy: "Incompatible return value type (got \"int\", expected \"str\")",
        pyright: "is not assignable to return type \"str\"",
    },
    Mistake {
        name: "option",
        mypy: "Unexpected keyword argument \"minimum\" for \"Query\"",
        pyright: "No parameter named \"minimum\"",
    },
    // Why `@route(...)` rather than module-level names: a misspelled option is reported.
    Mistake {
        name: "route",
        mypy: "Unexpected keyword argument \"tag\" for \"route\"",
        pyright: "No parameter named \"tag\"",
    },
];

#[test]
fn the_examples_pass_mypy_strict() {
    const TEST: &str = "the_examples_pass_mypy_strict";
    let Some(mypy) = Mypy::find(TEST) else { return };
    let typings = Typings::for_examples();
    let mut problems = Vec::new();
    for name in EXAMPLES {
        let example = workspace().join("examples").join(name);
        for file in route_files(&example) {
            if let Err(report) = mypy.check(&typings, &example.join("routes"), &file) {
                problems.push(report);
            }
        }
    }
    assert!(
        problems.is_empty(),
        "mypy --strict reports problems in the examples:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_filerouter_package_itself_passes_mypy_strict() {
    const TEST: &str = "the_filerouter_package_itself_passes_mypy_strict";
    let Some(mypy) = Mypy::find(TEST) else { return };
    let typings = Typings::new();
    let report = mypy.run(&typings, None, &["-p", "filerouter"]);
    assert!(
        report.is_ok(),
        "mypy --strict -p filerouter:\n{}",
        report.unwrap_err()
    );
}

#[test]
fn the_api_checks_under_mypy_strict_and_mistakes_are_reported() {
    const TEST: &str = "the_api_checks_under_mypy_strict_and_mistakes_are_reported";
    let Some(mypy) = Mypy::find(TEST) else { return };
    let project = Project::new(&[
        ("routes/good/route.py", WELL_TYPED),
        ("routes/bad/route.py", BADLY_TYPED),
    ]);
    let typings = Typings::new();
    let routes = project.path().join("routes");
    if let Err(report) = mypy.check(&typings, &routes, &routes.join("good/route.py")) {
        panic!("a well-typed route fails mypy --strict:\n{report}");
    }
    let bad = routes.join("bad/route.py");
    let report = mypy
        .check(&typings, &routes, &bad)
        .expect_err("mypy --strict passed a route with type errors");
    assert_reported(&report, &bad, |m| m.mypy);
}

#[test]
fn the_examples_and_the_api_pass_pyright() {
    const TEST: &str = "the_examples_and_the_api_pass_pyright";
    let Some(pyright) = Pyright::find(TEST) else {
        return;
    };
    let typings = Typings::for_examples();
    let mut problems = Vec::new();
    for name in EXAMPLES {
        let example = workspace().join("examples").join(name);
        let files = route_files(&example);
        if let Err(report) = pyright.check(&typings, &example.join("routes"), "standard", &files) {
            problems.push(format!("{name}:\n{report}"));
        }
    }
    assert!(
        problems.is_empty(),
        "pyright reports problems in the examples:\n{}",
        problems.join("\n")
    );

    let project = Project::new(&[
        ("routes/good/route.py", WELL_TYPED),
        ("routes/bad/route.py", BADLY_TYPED),
    ]);
    let typings = Typings::new();
    let routes = project.path().join("routes");
    let good = routes.join("good/route.py");
    if let Err(report) = pyright.check(&typings, &routes, "strict", &[good]) {
        panic!("a well-typed route fails pyright strict:\n{report}");
    }
    let bad = routes.join("bad/route.py");
    let report = pyright
        .check(&typings, &routes, "strict", std::slice::from_ref(&bad))
        .expect_err("pyright passed a route with type errors");
    assert_reported(&report, &bad, |m| m.pyright);
}

/// Every `# mistake: NAME` line of `file` is reported, with the words `said` picks.
fn assert_reported(report: &str, file: &Path, said: fn(&Mistake) -> &'static str) {
    let text = std::fs::read_to_string(file).unwrap();
    for mistake in &MISTAKES {
        let marker = format!("# mistake: {}", mistake.name);
        let line = text
            .lines()
            .position(|l| l.contains(&marker))
            .expect("a marked line")
            + 1;
        let at = format!("route.py:{line}:");
        assert!(
            report
                .lines()
                .any(|l| l.contains(&at) && l.contains(said(mistake))),
            "the {} mistake at line {line} is not reported as {:?}:\n{report}",
            mistake.name,
            said(mistake)
        );
    }
}

/// The `.py` files of a project that the sandbox runs: routes, `_lib` helpers, `config.py`,
/// `middleware.py`, `not-found.py`; not plugin sources, installed packages or FastAPI originals.
fn route_files(project: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "plugins" | ".packages" | "__pycache__" | ".data" | ".cache" | "typings"
                ) {
                    walk(&path, out);
                }
            } else if name.ends_with(".py") && name != "fastapi_app.py" {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(project, &mut files);
    files.sort();
    assert!(
        !files.is_empty(),
        "no Python files in {}",
        project.display()
    );
    files
}

/// A `typings/` folder as the README sets one up: a copy of the guest's `filerouter` package,
/// and for a project with plugins the stubs `filerouter plugins stubs` writes beside it.
struct Typings {
    dir: tempfile::TempDir,
}

impl Typings {
    fn new() -> Typings {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("typings/filerouter");
        copy_all(&workspace().join("guest-python/filerouter"), &package);
        for cache in ["__pycache__", ".mypy_cache"] {
            let _ = std::fs::remove_dir_all(package.join(cache));
        }
        assert!(package.join("py.typed").exists(), "no py.typed marker");
        Typings { dir }
    }

    /// One `typings/` for every example: with the stubs of the plugins those with plugins
    /// declare (the others import no `filerouter.plugins.NAME`).
    fn for_examples() -> Typings {
        let typings = Typings::new();
        let out = typings.path().to_str().unwrap().to_string();
        for name in EXAMPLES {
            let project = workspace().join("examples").join(name);
            if project.join("plugins").is_dir() {
                let dir = project.to_str().unwrap();
                let (code, stdout, stderr) = run(
                    &["plugins", "stubs", "--project", dir, "--out", &out],
                    &project,
                );
                assert_eq!(code, 0, "plugins stubs failed:\n{stdout}\n{stderr}");
            }
        }
        typings
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("typings")
    }
}

/// mypy from `tests/.venv`, with a cache of its own.
struct Mypy {
    python: PathBuf,
    cache: tempfile::TempDir,
}

impl Mypy {
    fn find(test: &str) -> Option<Mypy> {
        match python_venv() {
            Ok(venv) => Some(Mypy {
                python: venv.join("bin/python"),
                cache: tempfile::tempdir().unwrap(),
            }),
            Err(why) => {
                missing(test, &why, "python3 and python3-venv, and reach PyPI");
                None
            }
        }
    }

    /// `mypy --strict` on one file (route files share names, `route.py`, so one at a time).
    fn check(&self, typings: &Typings, routes: &Path, file: &Path) -> Result<(), String> {
        self.run(typings, Some(routes), &[file.to_str().unwrap()])
    }

    /// `mypy --strict ARGS` with `typings/` and `routes/` (when given) on `MYPYPATH`.
    fn run(&self, typings: &Typings, routes: Option<&Path>, args: &[&str]) -> Result<(), String> {
        let mut path = typings.path().into_os_string();
        if let Some(routes) = routes {
            path.push(":");
            path.push(routes);
        }
        run_tool(
            Command::new(&self.python)
                .args(["-m", "mypy", "--strict", "--python-version", PYTHON])
                .arg("--cache-dir")
                .arg(self.cache.path())
                .args(args)
                .env("MYPYPATH", path)
                .current_dir(self.cache.path()),
        )
        .map(drop)
    }
}

/// pyright from `tests/browser` (`npm ci` there when it is missing), on the venv's packages.
struct Pyright {
    bin: PathBuf,
    python: PathBuf,
}

impl Pyright {
    fn find(test: &str) -> Option<Pyright> {
        let venv = match python_venv() {
            Ok(venv) => venv,
            Err(why) => {
                missing(test, &why, "python3 and python3-venv, and reach PyPI");
                return None;
            }
        };
        let dir = workspace().join("tests/browser");
        let bin = dir.join("node_modules/.bin/pyright");
        let found = run_tool(Command::new("node").arg("--version"))
            .map_err(|_| "no node".to_string())
            .and_then(|_| {
                if !bin.exists() {
                    run_tool(
                        Command::new("npm")
                            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                            .current_dir(&dir),
                    )
                    .map_err(|e| format!("npm ci in tests/browser failed: {e}"))?;
                }
                Ok(())
            });
        if let Err(why) = found {
            missing(test, &why, "nodejs and npm (apt-get install nodejs npm)");
            return None;
        }
        Some(Pyright {
            bin,
            python: venv.join("bin/python"),
        })
    }

    /// pyright in `mode` (`standard`, `strict`) on `files`, with `typings/` as its stub path and
    /// `routes/` as an extra path. Plugin modules are stubs only (their code is WebAssembly), so
    /// "could not be resolved from source" is not reported.
    fn check(
        &self,
        typings: &Typings,
        routes: &Path,
        mode: &str,
        files: &[PathBuf],
    ) -> Result<(), String> {
        let config = serde_json::json!({
            "stubPath": typings.path(),
            "extraPaths": [routes],
            "typeCheckingMode": mode,
            "pythonVersion": PYTHON,
            "reportMissingModuleSource": "none",
        });
        let config_file = typings.dir.path().join("pyrightconfig.json");
        std::fs::write(&config_file, config.to_string()).unwrap();
        let out = run_tool(
            Command::new(&self.bin)
                .arg("--project")
                .arg(&config_file)
                .arg("--pythonpath")
                .arg(&self.python)
                .args(files),
        )?;
        // pyright exits 0 with warnings: a clean result has none either.
        if out.contains("0 errors, 0 warnings") {
            Ok(())
        } else {
            Err(out)
        }
    }
}
