//! The Python package (README: "Install with pip or uv"): the wheel that maturin builds from
//! `target/release` (no second compile), installed into fresh environments with pip, uv and
//! pipx; `filerouter init` then `pytest` in the new project; a TestClient test of
//! `examples/bookshop` (with a dependency override); mypy finding the package and its types.
//!
//! Everything is real: maturin, pip, uv, pipx, pytest and mypy from PyPI (pinned), the wheel's
//! own binary serving the projects in the sandbox. Without `tests/.venv`'s tools the tests skip
//! loudly, and fail in CI (`FILEROUTER_REQUIRE_BROWSER=1`).

use crate::support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use support::tools::{missing, python_venv, run_tool, workspace};

/// The versions installed next to the wheel (as pinned in tests/openapi/requirements.txt).
const PYTEST: &str = "pytest==9.2.0";
const MYPY: &str = "mypy==2.4.1";

/// The tools' venv (maturin, uv, pipx), or None after reporting it missing.
pub(crate) fn tools(test: &str) -> Option<PathBuf> {
    match python_venv() {
        Ok(venv) => Some(venv),
        Err(e) => {
            missing(test, &e, "python3 with venv, and PyPI");
            None
        }
    }
}

/// The wheel, built once per run of the suite into `target/wheel-test/dist` (tests/container.rs
/// installs it too, as the recipes of `deploy/container/` do).
pub(crate) fn wheel(tools: &Path) -> PathBuf {
    static WHEEL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = WHEEL.get_or_init(|| {
        let dist = workspace().join("target/wheel-test/dist");
        let _ = std::fs::remove_dir_all(&dist);
        // `cargo test` gives this process OUT_DIR, CARGO_MANIFEST_DIR and friends; passed on
        // to maturin's cargo they would mark `ring` dirty (its build script reruns when they
        // change) and rebuild it, rustls and the whole host crate: six minutes of CI here, and
        // again at the next `cargo build`. A user's shell has none of them. Only what cargo
        // sets for a test goes: the caller's own CARGO_HOME or CARGO_TARGET_DIR stays.
        const SET_BY_CARGO_TEST: &[&str] = &[
            "CARGO",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "OUT_DIR",
        ];
        let mut maturin = Command::new(tools.join("bin/maturin"));
        for (name, _) in std::env::vars_os() {
            let name_text = name.to_string_lossy();
            if SET_BY_CARGO_TEST.contains(&name_text.as_ref())
                || name_text.starts_with("CARGO_PKG_")
                || name_text.starts_with("CARGO_BIN_EXE_")
            {
                maturin.env_remove(name);
            }
        }
        run_tool(
            maturin
                .args(["build", "--release", "--out"])
                .arg(&dist)
                .current_dir(workspace()),
        )?;
        let mut wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
            .map_err(|e| format!("{dist:?}: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "whl"))
            .collect();
        match wheels.len() {
            1 => Ok(wheels.remove(0)),
            n => Err(format!("maturin left {n} wheels in {dist:?}")),
        }
    });
    match built {
        Ok(path) => path.clone(),
        Err(e) => panic!("building the wheel failed: {e}"),
    }
}

/// A fresh venv (python3 -m venv) with the wheel, pytest and mypy installed by pip: made once,
/// then shared read-only by the tests of this file.
fn pip_env(tools: &Path) -> PathBuf {
    static ENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let made = ENV.get_or_init(|| {
        let wheel = wheel(tools);
        let env = workspace().join("target/wheel-test/pip-env");
        run_tool(
            Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&env),
        )?;
        run_tool(
            Command::new(env.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .arg(&wheel)
                .args([PYTEST, MYPY]),
        )?;
        Ok(env)
    });
    match made {
        Ok(path) => path.clone(),
        Err(e) => panic!("installing the wheel with pip failed: {e}"),
    }
}

/// Run `program` with `args` in `cwd`, with the environment a user's shell would give it: no
/// FILEROUTER_BIN, the venv's bin first on PATH. (stdout + stderr, success).
fn shell(env: &Path, program: &str, args: &[&str], cwd: &Path) -> (String, bool) {
    shell_with(env, program, args, cwd, &[])
}

/// [`shell`] with extra environment variables.
fn shell_with(
    env: &Path,
    program: &str,
    args: &[&str],
    cwd: &Path,
    vars: &[(&str, &str)],
) -> (String, bool) {
    let path = format!(
        "{}:{}",
        env.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new(env.join("bin").join(program))
        .args(args)
        .current_dir(cwd)
        .env("PATH", path)
        .env("VIRTUAL_ENV", env)
        .env_remove("FILEROUTER_BIN")
        .env_remove("PYTHONPATH")
        .envs(vars.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (text, output.status.success())
}

#[test]
fn pip_install_then_init_then_pytest_passes() {
    const TEST: &str = "pip_install_then_init_then_pytest_passes";
    let Some(tools) = tools(TEST) else { return };
    let env = pip_env(&tools);
    let dir = tempfile::tempdir().unwrap();

    // The binary is on PATH, and `python -m filerouter` is the same command.
    let (out, ok) = shell(&env, "filerouter", &["--version"], dir.path());
    assert!(ok && out.starts_with("filerouter "), "{out}");
    let (module, ok) = shell(
        &env,
        "python",
        &["-m", "filerouter", "--version"],
        dir.path(),
    );
    assert!(ok && module == out, "{module} vs {out}");

    // The package imports on this machine, with its names; a sandbox service says where it
    // works instead of failing obscurely.
    let (out, ok) = shell(
        &env,
        "python",
        &[
            "-c",
            "import filerouter\n\
             from filerouter import Request, HTTPException, Depends, kv, db, settings\n\
             from filerouter.testing import TestClient\n\
             try:\n    kv.get('k')\nexcept RuntimeError as e:\n    print('refused:', e)\n",
        ],
        dir.path(),
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("refused: filerouter.kv works only inside filerouter's sandbox")
            && out.contains("TestClient"),
        "{out}"
    );

    // A new project's own tests pass.
    let (out, ok) = shell(&env, "filerouter", &["init", "app"], dir.path());
    assert!(ok, "{out}");
    let app = dir.path().join("app");
    let pyproject = std::fs::read_to_string(app.join("pyproject.toml")).unwrap();
    assert!(
        pyproject.contains("name = \"app\"") && pyproject.contains("dev = [\"filerouter\""),
        "{pyproject}"
    );
    let (out, ok) = shell(&env, "pytest", &["-q", "-p", "no:cacheprovider"], &app);
    assert!(ok && out.contains("3 passed"), "{out}");

    // A failing test's report carries the server's log (the pytest plugin).
    std::fs::write(
        app.join("tests/test_fails.py"),
        "def test_teapot(client):\n    assert client.get('/').status_code == 418\n",
    )
    .unwrap();
    let (out, ok) = shell(&env, "pytest", &["-q", "-p", "no:cacheprovider"], &app);
    assert!(!ok, "{out}");
    assert!(
        out.contains("1 failed, 3 passed")
            && out.contains("filerouter server log")
            && out.contains("GET / 200"),
        "{out}"
    );
    // A handler that raises: the client raises ServerError with the traceback's line.
    std::fs::create_dir_all(app.join("routes/boom")).unwrap();
    std::fs::write(
        app.join("routes/boom/route.py"),
        "def GET(request):\n    return 1 / 0\n",
    )
    .unwrap();
    std::fs::write(
        app.join("tests/test_fails.py"),
        "import pytest\nfrom filerouter.testing import ServerError\n\n\
         def test_boom(client):\n    with pytest.raises(ServerError) as raised:\n        client.get('/boom')\n    \
         assert 'ZeroDivisionError' in str(raised.value)\n    \
         assert 'routes/boom/route.py:2' in str(raised.value)\n",
    )
    .unwrap();
    let (out, ok) = shell(&env, "pytest", &["-q", "-p", "no:cacheprovider"], &app);
    assert!(ok && out.contains("4 passed"), "{out}");
}

#[test]
fn uv_and_pipx_install_a_working_command() {
    const TEST: &str = "uv_and_pipx_install_a_working_command";
    let Some(tools) = tools(TEST) else { return };
    let wheel = wheel(&tools);
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let version = |program: &Path| {
        let out = Command::new(program).arg("--version").output().unwrap();
        assert!(out.status.success(), "{program:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // uv tool install: its own environment, the command in UV_TOOL_BIN_DIR.
    run_tool(
        Command::new(tools.join("bin/uv"))
            .args(["tool", "install", "--quiet"])
            .arg(&wheel)
            .env("UV_TOOL_DIR", dir.path().join("uv-tools"))
            .env("UV_TOOL_BIN_DIR", &bin),
    )
    .unwrap();
    assert!(version(&bin.join("filerouter")).starts_with("filerouter "));

    // uv venv + uv pip install: the package and the binary in a fresh environment.
    let venv = dir.path().join("uv-venv");
    run_tool(
        Command::new(tools.join("bin/uv"))
            .args(["venv", "--quiet", "--seed"])
            .arg(&venv),
    )
    .unwrap();
    run_tool(
        Command::new(tools.join("bin/uv"))
            .args(["pip", "install", "--quiet", "--python"])
            .arg(venv.join("bin/python"))
            .arg(&wheel),
    )
    .unwrap();
    let out = run_tool(Command::new(venv.join("bin/python")).args([
        "-c",
        "from filerouter.testing import find_binary; print(find_binary())",
    ]))
    .unwrap();
    assert_eq!(
        Path::new(out.trim()),
        venv.join("bin/filerouter"),
        "the TestClient must find the environment's own binary"
    );

    // pipx install.
    let pipx_bin = dir.path().join("pipx-bin");
    run_tool(
        Command::new(tools.join("bin/pipx"))
            .arg("install")
            .arg(&wheel)
            .env("PIPX_HOME", dir.path().join("pipx-home"))
            .env("PIPX_BIN_DIR", &pipx_bin)
            .env("PIPX_MAN_DIR", dir.path().join("pipx-man")),
    )
    .unwrap();
    assert!(version(&pipx_bin.join("filerouter")).starts_with("filerouter "));
}

#[test]
fn a_testclient_test_of_the_bookshop_passes() {
    const TEST: &str = "a_testclient_test_of_the_bookshop_passes";
    let Some(tools) = tools(TEST) else { return };
    let env = pip_env(&tools);
    let dir = tempfile::tempdir().unwrap();
    let shop = dir.path().join("bookshop");
    support::files::copy_tree(
        &workspace().join("examples/bookshop"),
        &shop,
        &[".packages", ".cache", ".data", "__pycache__"],
    );
    let (out, ok) = shell(
        &env,
        "filerouter",
        &[
            "packages",
            "install",
            "--python",
            env.join("bin/python").to_str().unwrap(),
        ],
        &shop,
    );
    assert!(ok, "{out}");
    std::fs::create_dir_all(shop.join("tests")).unwrap();
    std::fs::write(shop.join("tests/test_bookshop.py"), BOOKSHOP_TESTS).unwrap();
    std::fs::write(shop.join("tests/overrides.py"), BOOKSHOP_OVERRIDES).unwrap();
    let (out, ok) = shell(
        &env,
        "pytest",
        &["-q", "-p", "no:cacheprovider", "tests"],
        &shop,
    );
    assert!(ok && out.contains("5 passed"), "{out}");
}

const BOOKSHOP_TESTS: &str = r#"
from pathlib import Path

import pytest
from filerouter.testing import TestClient

PROJECT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def client():
    with TestClient(PROJECT) as client:
        yield client


def token(client, user="alice", password="wonderland"):
    response = client.post("/token", data={"username": user, "password": password})
    assert response.status_code == 200, response.text
    return response.json()["access_token"]


def test_books_are_listed_and_paged(client):
    response = client.get("/books", params={"limit": 2})
    assert response.status_code == 200
    assert [b["title"] for b in response.json()] == ["Dune", "Cosmos"]
    assert response.headers["content-type"].startswith("application/json")


def test_a_bad_query_is_a_422_in_fastapi_shape(client):
    response = client.get("/books", params={"limit": 0})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "limit"]


def test_me_needs_a_token(client):
    response = client.get("/me")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    me = client.get("/me", headers={"Authorization": f"Bearer {token(client)}"})
    assert me.json() == {"user": "alice"}


def test_a_created_book_is_read_back(client):
    auth = {"Authorization": f"Bearer {token(client)}"}
    book = {"title": "Solaris", "author": "Stanislaw Lem", "price": 11.0, "genre": "fiction"}
    created = client.post("/books", json=book, headers=auth)
    assert created.status_code == 201, created.text
    read = client.get(f"/books/{created.json()['id']}")
    assert read.status_code == 200
    assert read.json()["title"] == "Solaris"


def test_dependency_overrides_replace_the_current_user():
    with TestClient(PROJECT, dependency_overrides=Path(__file__).parent / "overrides.py") as client:
        assert client.get("/me").json() == {"user": "tester"}
"#;

const BOOKSHOP_OVERRIDES: &str = r#"
from _lib.auth import current_user


def fake_user() -> str:
    return "tester"


dependency_overrides = {current_user: fake_user}
"#;

#[test]
fn mypy_finds_the_package_and_its_types() {
    const TEST: &str = "mypy_finds_the_package_and_its_types";
    let Some(tools) = tools(TEST) else { return };
    let env = pip_env(&tools);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.py"), TYPED_ROUTE).unwrap();
    std::fs::write(
        dir.path().join("bad.py"),
        "from filerouter import kv\n\nkv.set(\"k\", 1, ttl=\"soon\")\n",
    )
    .unwrap();
    // One mypy cache for the four runs below, in the test's own folder: the first run checks
    // the standard library and the package, the others reuse that (about 20 s of CPU each
    // with `--no-incremental`). mypy checks each file's hash against the cache, so the edited
    // route below is checked again.
    let cache = dir.path().join(".mypy_cache");
    let cache = cache.to_str().unwrap();
    let (out, ok) = shell(
        &env,
        "mypy",
        &["--strict", "--cache-dir", cache, "good.py"],
        dir.path(),
    );
    assert!(ok && out.contains("Success"), "{out}");
    let (out, ok) = shell(
        &env,
        "mypy",
        &["--strict", "--cache-dir", cache, "bad.py"],
        dir.path(),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("bad.py:3: error") && out.contains("\"ttl\""),
        "{out}"
    );

    // Plugins' stubs (`filerouter plugins stubs`, into typings/) sit beside the installed
    // package: mypy sees both, and checks a plugin call's arguments.
    let demo = dir.path().join("plugins-demo");
    support::files::copy_tree(
        &workspace().join("examples/plugins-demo"),
        &demo,
        &[".cache", ".data", "__pycache__", "target"],
    );
    let (out, ok) = shell(&env, "filerouter", &["plugins", "stubs"], &demo);
    assert!(ok, "{out}");
    let check = [
        "--strict",
        "--cache-dir",
        cache,
        "--python-version",
        "3.14",
        "routes/slug/route.py",
    ];
    let mypy_path = [("MYPYPATH", "typings:routes")];
    let (out, ok) = shell_with(&env, "mypy", &check, &demo, &mypy_path);
    assert!(ok && out.contains("Success"), "{out}");
    let route = demo.join("routes/slug/route.py");
    let source = std::fs::read_to_string(&route).unwrap();
    assert!(source.contains("textkit.slugify(title)"), "{source}");
    std::fs::write(
        &route,
        source.replace("textkit.slugify(title)", "textkit.slugify(1)"),
    )
    .unwrap();
    let (out, ok) = shell_with(&env, "mypy", &check, &demo, &mypy_path);
    assert!(
        !ok && out.contains("\"slugify\" has incompatible type \"int\""),
        "{out}"
    );
}

/// A route that uses what exists only in the sandbox (kv, the database, passwords, settings
/// and secrets, plugins' result types) and the request API.
const TYPED_ROUTE: &str = r#"
import sqlite3
from typing import Any

from filerouter import Depends, HTTPException, Request, db, env, kv, passwords, settings
from filerouter.plugins import Err, Ok, PluginError


def connection() -> sqlite3.Connection:
    return db.connect()


def GET(request: Request, conn: sqlite3.Connection = Depends(connection)) -> dict[str, Any]:
    visits: int = kv.incr("visits")
    rows = conn.execute("SELECT 1").fetchall()
    key: str = env["API_KEY"]
    hashed: bytes = passwords.pbkdf2_hmac("sha256", b"secret", b"salt", 1000)
    answer: Ok | Err = Ok(1)
    if request.query_params.get("fail"):
        raise HTTPException(400, "failed")
    try:
        pass
    except PluginError as error:
        raise HTTPException(502, str(error)) from None
    return {"visits": visits, "rows": len(rows), "key": key[:0], "hashed": bool(hashed),
            "answer": answer.value, "title": settings.get("title")}
"#;

/// What the TestClient promises beyond the happy path, each against the real server: cookies
/// kept between requests, redirects followed (or not), uploads, JSON and form bodies, headers
/// of any case, the project's secrets through `env=`, a data folder per client (kv starts
/// empty in each), a failed start that shows the server's output, `mode="run"` from the build
/// cache, built again when a route changed (and `filerouter status` saying so), and the async
/// client.
#[test]
fn the_testclient_keeps_its_promises() {
    const TEST: &str = "the_testclient_keeps_its_promises";
    let Some(tools) = tools(TEST) else { return };
    let env = pip_env(&tools);
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("app");
    for (file, text) in PROMISES_PROJECT {
        let path = app.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let (out, ok) = shell(&env, "filerouter", &["build"], &app);
    assert!(ok, "{out}");
    let (out, ok) = shell(
        &env,
        "pytest",
        &["-q", "-p", "no:cacheprovider", "tests"],
        &app,
    );
    assert!(ok && out.contains("9 passed"), "{out}");
}

const PROMISES_PROJECT: &[(&str, &str)] = &[
    (
        "config.py",
        "environment = {\"names\": [\"API_KEY\"], \"optional\": []}\n",
    ),
    (
        "routes/login/route.py",
        "from filerouter import JSONResponse\n\n\
         def POST(request):\n    return JSONResponse({'ok': True}, headers={'set-cookie': 'session=abc123; Path=/'})\n",
    ),
    (
        "routes/whoami/route.py",
        "def GET(request):\n    return {'session': request.cookies.get('session'), 'agent': request.headers.get('x-agent')}\n",
    ),
    (
        "routes/old/route.py",
        "from filerouter import RedirectResponse\n\n\
         def GET(request):\n    return RedirectResponse('/whoami')\n",
    ),
    (
        "routes/upload/route.py",
        "from filerouter import File, Form, UploadFile\n\n\
         async def POST(request, doc: UploadFile = File(), note: str = Form('')):\n    \
         data = await doc.read()\n    \
         return {'name': doc.filename, 'size': len(data), 'type': doc.content_type, 'note': note}\n",
    ),
    (
        "routes/echo/route.py",
        "async def POST(request):\n    return {'json': await request.json()}\n",
    ),
    (
        "routes/form/route.py",
        "from filerouter import Form\n\n\
         def POST(request, name: str = Form(), tags: list[str] = Form([])):\n    \
         return {'name': name, 'tags': tags}\n",
    ),
    (
        "routes/secret/route.py",
        "from filerouter import env\n\n\
         def GET(request):\n    return {'key': env['API_KEY']}\n",
    ),
    (
        "routes/count/route.py",
        "from filerouter import kv\n\n\
         def POST(request):\n    return {'n': kv.incr('hits')}\n",
    ),
    (
        "tests/test_promises.py",
        r#"
from pathlib import Path

import pytest
from filerouter.testing import ServerError, TestClient

PROJECT = Path(__file__).resolve().parent.parent
SECRET = {"API_KEY": "k-123"}


def test_cookies_are_kept_and_redirects_followed():
    with TestClient(PROJECT, env=SECRET) as client:
        login = client.post("/login")
        assert login.cookies == {"session": "abc123"}
        assert client.cookies["session"] == "abc123"
        me = client.get("/whoami", headers={"X-Agent": "pytest"})
        assert me.json() == {"session": "abc123", "agent": "pytest"}
        followed = client.get("/old")
        assert followed.status_code == 200 and followed.url.endswith("/whoami")
        assert [r.status_code for r in followed.history] == [307]
        stay = client.get("/old", follow_redirects=False)
        assert stay.status_code == 307 and stay.headers["Location"] == "/whoami"


def test_bodies_uploads_and_forms():
    with TestClient(PROJECT, env=SECRET) as client:
        assert client.post("/echo", json={"a": [1, 2]}).json() == {"json": {"a": [1, 2]}}
        up = client.post("/upload", files={"doc": ("notes.txt", b"hello", "text/plain")}, data={"note": "n"})
        assert up.json() == {"name": "notes.txt", "size": 5, "type": "text/plain", "note": "n"}
        form = client.post("/form", data={"name": "ann", "tags": ["x", "y"]})
        assert form.json() == {"name": "ann", "tags": ["x", "y"]}


def test_secrets_come_from_env():
    with TestClient(PROJECT, env=SECRET) as client:
        assert client.get("/secret").json() == {"key": "k-123"}


def test_each_client_has_its_own_data():
    for _ in range(2):
        with TestClient(PROJECT, env=SECRET) as client:
            assert client.post("/count").json() == {"n": 1}
            assert client.post("/count").json() == {"n": 2}


def test_run_mode_serves_the_build_cache():
    with TestClient(PROJECT, mode="run", env=SECRET) as client:
        assert client.get("/secret").json() == {"key": "k-123"}
        assert client.post("/count").json() == {"n": 1}


def test_run_mode_never_serves_an_old_build():
    import subprocess

    route = PROJECT / "routes" / "version" / "route.py"
    route.parent.mkdir(exist_ok=True)
    route.write_text("def GET(request):\n    return {'version': 1}\n")
    status = lambda: subprocess.run(["filerouter", "status", "--project", str(PROJECT)], capture_output=True, text=True).stdout
    assert "sources:     changed since the build" in status()
    with TestClient(PROJECT, mode="run", env=SECRET) as client:
        assert client.get("/version").json() == {"version": 1}
    assert "sources:     match the build" in status()
    route.write_text("def GET(request):\n    return {'version': 2}\n")
    with TestClient(PROJECT, mode="run", env=SECRET) as client:
        assert client.get("/version").json() == {"version": 2}


def test_the_async_client():
    import asyncio

    from filerouter.testing import AsyncTestClient

    async def main():
        async with AsyncTestClient(PROJECT, env=SECRET) as client:
            first, second = await asyncio.gather(client.post("/count"), client.post("/count"))
            assert sorted([first.json()["n"], second.json()["n"]]) == [1, 2]
            assert (await client.get("/secret")).json() == {"key": "k-123"}

    asyncio.run(main())


def test_a_server_that_cannot_start_shows_its_output(tmp_path):
    (tmp_path / "routes").mkdir()
    (tmp_path / "config.py").write_text("sandbox = {'memory_mb': 0}\n")
    with pytest.raises(ServerError) as raised:
        TestClient(tmp_path).start()
    assert "memory_mb" in str(raised.value)


def test_a_missing_project_is_named():
    with pytest.raises(FileNotFoundError) as raised:
        TestClient("/nonexistent/project")
    assert "routes/" in str(raised.value)
"#,
    ),
];
