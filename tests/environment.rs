//! Settings and secrets for route code, given outside the source (`host/src/environment.rs`,
//! `guest-python/filerouter/environment.py`): `config.py` declares the names, the operator gives
//! the values (the server's environment, an env file, a tenant's section of the tenants file),
//! route code reads them through `os.environ` and `filerouter.env`; they are never in the build
//! cache, `/docs`, the log or an error page, and a tenant never sees the server's environment.
//! The JWT-login app of the issue ports with its native bcrypt hashes and its secret outside.

use crate::support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, SystemTime},
};

use serde_json::Value;
use support::{
    Project, Server, eventually, json, run,
    tools::{missing, python_venv, run_tool},
};

/// A secret long enough to be redacted, unlikely to appear by chance.
const SECRET: &str = "sk_test_4f9a1c-secret-from-the-env-file";
const OTHER: &str = "sk_test_77e0b2-secret-from-the-server";

const CONFIG: &str = r#"
environment = {"names": ["JWT_SECRET"], "optional": ["SENTRY_DSN", "HOME"]}
settings = {"page_size": 20, "features": {"beta": True}}
"#;

/// Reads everything route code can see of its environment.
const SHOW: &str = r#"
import os
from filerouter import env, settings

PAGE_SIZE = settings["page_size"]          # the project's own settings: fine at import time
LIBRARY_FLAG = os.environ.get("SOME_LIBRARY_DEBUG")   # undeclared names: fine too

def GET(request):
    try:
        env["NOT_DECLARED"]
        undeclared = None
    except KeyError as e:
        undeclared = str(e)
    try:
        env["SENTRY_DSN"]
        optional = None
    except KeyError as e:
        optional = type(e).__name__
    return {
        "env": env["JWT_SECRET"],
        "os": os.environ["JWT_SECRET"],
        "getenv": os.getenv("JWT_SECRET"),
        "optional_default": os.getenv("SENTRY_DSN", "none"),
        "optional_get": env.get("SENTRY_DSN"),
        "optional_error": optional,
        "undeclared_error": undeclared,
        "home": os.environ.get("HOME"),
        "path": os.environ.get("PATH"),
        "names": sorted(env),
        "environ_keys": sorted(os.environ),
        "page_size": PAGE_SIZE,
        "features": dict(settings["features"]),
        "is_environ": isinstance(os.environ, type(os.environ)) and hasattr(os.environ, "copy"),
    }

async def POST(request):
    body = await request.json()
    os.environ["WRITTEN"] = body["value"]
    return {"written": os.environ["WRITTEN"]}

def PUT(request):
    return {"written": os.environ.get("WRITTEN")}
"#;

/// Leaks the secret every way it can, but in the response.
const LEAK: &str = r#"
import logging
from filerouter import env

def GET(request):
    print("printing", env["JWT_SECRET"])
    logging.getLogger("app").warning("logging %s", env["JWT_SECRET"])
    raise ValueError("bad token " + env["JWT_SECRET"])
"#;

fn project(env_file: &str) -> Project {
    let project = Project::new(&[
        ("config.py", CONFIG),
        ("routes/show/route.py", SHOW),
        ("routes/leak/route.py", LEAK),
    ]);
    project.write(".env", env_file);
    project
}

/// The user's data folder, where filerouter keeps the key that names its compiled guests
/// (`~/.local/share/filerouter/code.key`). A test that gives the server another `HOME` passes
/// this as `XDG_DATA_HOME` too: with a key of its own the server would refuse the shared cache's
/// compiled guest, remove it and compile the whole guest again (a minute on a busy 2-core
/// machine, and every other test then compiles it once more too).
fn own_data_dir() -> String {
    match std::env::var_os("XDG_DATA_HOME") {
        Some(dir) if !dir.is_empty() => dir.to_string_lossy().into_owned(),
        _ => format!("{}/.local/share", std::env::var("HOME").expect("HOME")),
    }
}

#[test]
fn dev_gives_route_code_the_declared_values_and_nothing_else() {
    let project = project(&format!(
        "# the project's env file\nJWT_SECRET=\"{SECRET}\"\nUNDECLARED=nope\nexport SENTRY_DSN_TYPO=x\n"
    ));
    let data = own_data_dir();
    let server = Server::dev_with_env(
        &project,
        &[("HOME", "/home/of-the-developer"), ("XDG_DATA_HOME", &data)],
    );
    let body = json(server.get("/show"));
    assert_eq!(body["env"], SECRET, "{body}");
    assert_eq!(body["os"], SECRET);
    assert_eq!(body["getenv"], SECRET);
    assert_eq!(body["optional_default"], "none");
    assert_eq!(body["optional_get"], Value::Null);
    assert_eq!(body["optional_error"], "MissingSettingError");
    let undeclared = body["undeclared_error"].as_str().unwrap();
    assert!(
        undeclared.contains("not declared in config.py"),
        "{undeclared}"
    );
    // One project (dev, run) is given the server's environment for the names it declares
    // (HOME), and nothing else of it (PATH).
    assert_eq!(body["home"], "/home/of-the-developer");
    assert_eq!(body["path"], Value::Null);
    assert_eq!(body["names"], serde_json::json!(["HOME", "JWT_SECRET"]));
    // os.environ holds the declared names with a value, and nothing of the host's or the
    // guest's own start-up.
    assert_eq!(
        body["environ_keys"],
        serde_json::json!(["HOME", "JWT_SECRET"])
    );
    assert_eq!(body["page_size"], 20);
    assert_eq!(body["features"], serde_json::json!({"beta": true}));
    assert_eq!(body["is_environ"], true);
    // A write lasts for its request only.
    let written = server
        .request("POST", "/show")
        .json(&serde_json::json!({"value": "mine"}))
        .send()
        .unwrap();
    assert_eq!(json(written)["written"], "mine");
    let later = server.request("PUT", "/show").send().unwrap();
    assert_eq!(json(later)["written"], Value::Null);
    assert!(
        server
            .log()
            .contains("UNDECLARED is not declared in config.py's environment"),
        "{}",
        server.log()
    );

    // The server's own environment wins over the env file, as with dotenv.
    let server = Server::dev_with_env(&project, &[("JWT_SECRET", OTHER)]);
    assert_eq!(json(server.get("/show"))["env"], OTHER);
}

#[test]
fn an_edited_env_file_is_read_again_by_dev() {
    let project = project(&format!("JWT_SECRET={SECRET}\n"));
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/show"))["env"], SECRET);
    project.write(".env", &format!("JWT_SECRET={OTHER}\n"));
    assert!(
        eventually(Duration::from_secs(30), || json(server.get("/show"))["env"]
            == OTHER),
        "{}",
        server.log()
    );
    // A broken file keeps the last good values and shows where it is broken.
    project.write(".env", "JWT_SECRET=ok\nthis line is no assignment\n");
    assert!(
        eventually(Duration::from_secs(30), || {
            let response = server.get("/show");
            response.status() == 500 && response.text().unwrap().contains(".env:2")
        }),
        "{}",
        server.log()
    );
    project.write(".env", &format!("JWT_SECRET={SECRET}\n"));
    assert!(
        eventually(Duration::from_secs(30), || json(server.get("/show"))["env"]
            == SECRET),
        "{}",
        server.log()
    );
}

#[test]
fn values_are_redacted_from_the_log_and_error_pages() {
    let project = project(&format!("JWT_SECRET=\"{SECRET}\"\n"));
    let server = Server::dev(&project);
    let response = server.get("/leak");
    assert_eq!(response.status(), 500);
    let page = response.text().unwrap();
    assert!(!page.contains(SECRET), "{page}");
    assert!(page.contains("bad token [JWT_SECRET]"), "{page}");
    let html = server
        .request("GET", "/leak")
        .header("accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(!html.contains(SECRET));
    assert!(
        eventually(Duration::from_secs(20), || server
            .log()
            .contains("printing [JWT_SECRET]")),
        "{}",
        server.log()
    );
    let log = server.log();
    assert!(!log.contains(SECRET), "{log}");
    assert!(log.contains("logging [JWT_SECRET]"), "{log}");
}

#[test]
fn module_level_reads_of_a_declared_name_fail_with_their_line_in_dev_and_build() {
    for (source, how) in [
        (
            "import os\n\nSECRET = os.environ['JWT_SECRET']\n\ndef GET(request):\n    return {}\n",
            "os.environ['JWT_SECRET']",
        ),
        // A default would otherwise be built in quietly, and used in production.
        (
            "import os\n\nSECRET = os.getenv('JWT_SECRET', 'dev-secret')\n\ndef GET(request):\n    return {}\n",
            "os.environ['JWT_SECRET']",
        ),
        (
            "from filerouter import env\n\nSECRET = env.get('JWT_SECRET')\n\ndef GET(request):\n    return {}\n",
            "env['JWT_SECRET']",
        ),
    ] {
        let project = Project::new(&[
            ("config.py", CONFIG),
            ("routes/early/route.py", source),
            (".env", &format!("JWT_SECRET={SECRET}\n")),
        ]);
        let server = Server::dev(&project);
        let response = server.get("/early");
        assert_eq!(response.status(), 500);
        let body = json(response);
        assert_eq!(body["error"]["type"], "ReadAtImportError", "{body}");
        assert_eq!(body["error"]["line"], 3, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(how), "{message}");
        assert!(message.contains("inside the handler"), "{message}");
        drop(server);

        let (code, _, stderr) = run(&["build"], project.path());
        assert_ne!(code, 0, "{stderr}");
        assert!(
            stderr.contains("routes/early/route.py:3: ReadAtImportError"),
            "{stderr}"
        );
    }
}

/// Every file under `dir` changed since `since` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str, since: SystemTime) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let changed = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|m| m >= since);
        if path.is_dir() {
            found.extend(files_containing(&path, needle, since));
        } else if changed
            && let Ok(bytes) = std::fs::read(&path)
            && bytes
                .windows(needle.len())
                .any(|window| window == needle.as_bytes())
        {
            found.push(path.display().to_string());
        }
    }
    found
}

/// Where the memory images `run` maps go: `$FILEROUTER_CACHE_DIR/images`, else the default.
fn images_dir() -> PathBuf {
    let base = match std::env::var_os("FILEROUTER_CACHE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/filerouter"),
    };
    base.join("images")
}

/// `filerouter ARGS` in `cwd`, expected to stop with an error within a minute.
fn refused(args: &[&str], cwd: &Path) -> String {
    let run = support::files::run_bounded(args, cwd, Duration::from_secs(60), 4 << 30);
    assert!(run.killed.is_none(), "{args:?}: {run:?}");
    assert_ne!(run.code, Some(0), "{args:?}: {}", run.stderr);
    run.stderr
}

#[test]
fn values_are_read_at_start_never_built_in_and_never_in_docs() {
    let project = project(&format!("JWT_SECRET={SECRET}\n"));
    let started = SystemTime::now() - Duration::from_secs(2);
    let (code, stdout, stderr) = run(&["build"], project.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // Neither the project's cache nor (below) the memory image that `run` maps (the snapshot's
    // memory, not compressed) holds the value the build could have read.
    assert_eq!(
        files_containing(&project.path().join(".cache"), SECRET, started),
        Vec::<String>::new()
    );

    // `run` reads the values when it starts: a new one, without a new build.
    project.write(".env", "");
    let server = Server::run(&project, &[("JWT_SECRET", OTHER)]);
    let body = json(server.get("/show"));
    assert_eq!(body["env"], OTHER);
    let images = images_dir();
    assert!(
        !files_containing(&images, "routes/show/route.py", started).is_empty(),
        "the memory image run maps is not in {}",
        images.display()
    );
    assert_eq!(
        files_containing(&images, SECRET, started),
        Vec::<String>::new()
    );

    assert_eq!(body["page_size"], 20);
    for path in ["/openapi.json", "/docs"] {
        let text = server.get(path).text().unwrap();
        assert!(!text.contains(OTHER), "{path}");
    }
    let response = server.get("/leak");
    assert_eq!(response.status(), 500);
    assert!(!response.text().unwrap().contains(OTHER));
    assert!(!server.log().contains(OTHER), "{}", server.log());
    drop(server);

    // Without a value for a required name, `run` refuses to start and says where to give it.
    let stderr = refused(&["run", "--port", "0"], project.path());
    assert!(
        stderr.contains("requires JWT_SECRET, which has no value"),
        "{stderr}"
    );
}

#[test]
fn env_files_that_are_malformed_or_not_files_are_refused_with_their_name() {
    // A bad line names its line; `$VAR` is never substituted from the server's environment.
    let project = project("JWT_SECRET=ok\n\n1BAD=x\n");
    let stderr = refused(&["dev", "--port", "0"], project.path());
    assert!(stderr.contains(".env:3:"), "{stderr}");
    assert!(stderr.contains("not a variable name"), "{stderr}");

    let project = project_with_dollar();
    let server = Server::dev_with_env(&project, &[]);
    assert_eq!(json(server.get("/show"))["env"], "prefix-$HOME-${PATH}");
    drop(server);

    // A FIFO is refused at once (never read, so never blocks), a link out of the project too.
    let project = Project::new(&[("config.py", CONFIG), ("routes/show/route.py", SHOW)]);
    support::files::mkfifo(&project.path().join(".env"));
    let stderr = refused(&["dev", "--port", "0"], project.path());
    assert!(stderr.contains("not a regular file"), "{stderr}");

    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("host.env"), "JWT_SECRET=x\n").unwrap();
    let project = Project::new(&[("config.py", CONFIG), ("routes/show/route.py", SHOW)]);
    support::files::symlink(
        outside.path().join("host.env"),
        &project.path().join(".env"),
    );
    let stderr = refused(&["dev", "--port", "0"], project.path());
    assert!(stderr.contains("outside the project"), "{stderr}");

    // A file config.py names must exist.
    let project = Project::new(&[
        (
            "config.py",
            "environment = {'names': ['JWT_SECRET'], 'file': 'secrets.env'}\n",
        ),
        ("routes/show/route.py", SHOW),
    ]);
    let stderr = refused(&["dev", "--port", "0"], project.path());
    assert!(stderr.contains("secrets.env"), "{stderr}");
}

fn project_with_dollar() -> Project {
    project("JWT_SECRET=\"prefix-$HOME-${PATH}\"\n")
}

#[test]
fn config_py_keeps_framework_settings_strict_and_says_where_the_project_s_go() {
    for (config, expected) in [
        (
            "secret_key = 'x'\n",
            "The project's own settings go in `settings = {'secret_key': ...}`",
        ),
        (
            "environment = {'names': ['1BAD']}\n",
            "'1BAD' in 'environment['names']' is not a variable name",
        ),
        (
            "environment = {'names': ['A'], 'optional': ['A']}\n",
            "'A' is named twice in 'environment'",
        ),
        ("environment = {'name': ['A']}\n", "unknown key 'name'"),
        (
            "settings = {'when': object()}\n",
            "'settings' may hold str, int, float, bool, None, lists and dicts only",
        ),
    ] {
        let project = Project::new(&[("config.py", config), ("routes/show/route.py", SHOW)]);
        let (code, _, stderr) = run(&["build"], project.path());
        assert_ne!(code, 0, "{config}");
        assert!(stderr.contains("config.py:1"), "{config}: {stderr}");
        assert!(stderr.contains(expected), "{config}: {stderr}");
    }
}

/// Tenants get values from their section of the tenants file (or the operator's env file), and
/// never from the server's environment; one without a required value is refused alone.
#[test]
fn each_tenant_gets_its_own_values_and_never_the_servers() {
    let site = tempfile::tempdir().unwrap();
    for name in ["alpha", "beta", "gamma"] {
        let dir = site.path().join(name);
        std::fs::create_dir_all(dir.join("routes/show")).unwrap();
        std::fs::write(dir.join("config.py"), CONFIG).unwrap();
        std::fs::write(dir.join("routes/show/route.py"), SHOW).unwrap();
        let (code, stdout, stderr) = run(&["build"], &dir);
        assert_eq!(code, 0, "{name}: {stdout}\n{stderr}");
    }
    std::fs::write(
        site.path().join("beta.env"),
        "JWT_SECRET=beta-secret-from-a-file\n",
    )
    .unwrap();
    let toml = |alpha: &str| {
        support::dedent(&format!(
            r#"
            [tenant.alpha]
            hosts = ["alpha.test"]
            project = "alpha"

            [tenant.alpha.env]
            JWT_SECRET = "{alpha}"

            [tenant.beta]
            hosts = ["beta.test"]
            project = "beta"
            env_file = "beta.env"

            [tenant.gamma]
            hosts = ["gamma.test"]
            project = "gamma"
            "#
        ))
    };
    let config = site.path().join("tenants.toml");
    std::fs::write(&config, toml("alpha-secret-in-the-file")).unwrap();
    // The server's own environment has a JWT_SECRET and a HOME: no tenant may see either.
    let server = Server::start(
        &["run", "--tenants", config.to_str().unwrap()],
        &[
            ("JWT_SECRET", OTHER),
            ("HOME", "/root/of/the/server"),
            ("XDG_DATA_HOME", &own_data_dir()),
        ],
        Duration::from_secs(120),
    );
    let show = |host: &str| {
        support::client()
            .get(server.url("/show"))
            .header("host", host)
            .send()
            .unwrap()
    };
    let alpha = json(show("alpha.test"));
    assert_eq!(alpha["env"], "alpha-secret-in-the-file");
    assert_eq!(alpha["home"], Value::Null);
    assert_eq!(json(show("beta.test"))["env"], "beta-secret-from-a-file");
    let gamma = show("gamma.test");
    assert_eq!(gamma.status(), 503);
    assert!(
        eventually(Duration::from_secs(20), || server
            .log()
            .contains("requires JWT_SECRET, which has no value")),
        "{}",
        server.log()
    );
    assert!(!server.log().contains(OTHER));

    // New values in the tenants file reach the tenant without a restart.
    let tmp = site.path().join("tenants.toml.tmp");
    std::fs::write(&tmp, toml("alpha-secret-rotated")).unwrap();
    std::fs::rename(&tmp, &config).unwrap();
    assert!(
        eventually(Duration::from_secs(15), || json(show("alpha.test"))["env"]
            == "alpha-secret-rotated"),
        "{}",
        server.log()
    );
}

#[test]
fn a_tenants_file_with_a_bad_env_names_the_line() {
    let site = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(site.path().join("alpha/routes")).unwrap();
    for (text, expected) in [
        (
            "[tenant.alpha]\nhosts = [\"a.test\"]\nproject = \"alpha\"\n\n[tenant.alpha.env]\n\"1BAD\" = \"x\"\n",
            "not a variable name",
        ),
        (
            "[tenant.alpha]\nhosts = [\"a.test\"]\nproject = \"alpha\"\nenv_file = \"missing.env\"\n",
            "tenants.toml:4: tenant alpha: `env_file`",
        ),
        (
            "[tenant.alpha]\nhosts = [\"a.test\"]\nproject = \"alpha\"\n\n[tenant.alpha.env]\nPORT = 8080\n",
            "tenants.toml:6",
        ),
    ] {
        let config = site.path().join("tenants.toml");
        std::fs::write(&config, text).unwrap();
        let stderr = refused(
            &["run", "--tenants", config.to_str().unwrap(), "--port", "0"],
            site.path(),
        );
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}

/// The issue's JWT-login app: users whose bcrypt hashes were made by the native bcrypt package
/// (kept in the database, unchanged), passlib from PyPI verifying them, PyJWT signing tokens with
/// a secret the operator gives at start. The token verifies outside the sandbox with the same
/// secret, and the secret is in no file of the build.
#[test]
fn the_jwt_login_app_ports_with_its_hashes_and_its_secret_out_of_the_source() {
    const TEST: &str = "the_jwt_login_app_ports_with_its_hashes_and_its_secret_out_of_the_source";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let python = venv.join("bin/python");
    let hashed = run_tool(Command::new(&python).args([
        "-c",
        "import bcrypt; print(bcrypt.hashpw(b'hunter2-but-longer', bcrypt.gensalt(10)).decode())",
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    let project = Project::new(&[
        (
            "requirements.txt",
            "passlib[bcrypt]==1.7.4\nPyJWT==2.15.1\n",
        ),
        (
            "config.py",
            "environment = {\"names\": [\"JWT_SECRET\"]}\nsettings = {\"token_minutes\": 30}\n",
        ),
        (
            "migrations/0001_users.sql",
            &format!(
                "CREATE TABLE users (name TEXT PRIMARY KEY, password_hash TEXT NOT NULL);\nINSERT INTO users VALUES ('alice', '{}');\n",
                hashed.trim()
            ),
        ),
        (
            "routes/token/route.py",
            r#"
            import datetime
            import sqlite3

            import jwt
            from filerouter import Depends, Form, HTTPException, env, settings
            from passlib.context import CryptContext

            crypt = CryptContext(schemes=["bcrypt"], deprecated="auto")

            def secret() -> str:
                return env["JWT_SECRET"]

            def POST(request, username: str = Form(), password: str = Form(), key: str = Depends(secret)):
                row = sqlite3.connect("app.db").execute(
                    "SELECT password_hash FROM users WHERE name = ?", (username,)
                ).fetchone()
                if row is None or not crypt.verify(password, row[0]):
                    raise HTTPException(401, "Incorrect username or password")
                expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
                    minutes=settings["token_minutes"]
                )
                token = jwt.encode({"sub": username, "exp": expires}, key, algorithm="HS256")
                return {"access_token": token, "token_type": "bearer"}
            "#,
        ),
        (
            "routes/me/route.py",
            r#"
            import jwt
            from filerouter import HTTPException, env

            def GET(request):
                token = request.headers.get("authorization", "").removeprefix("Bearer ")
                try:
                    claims = jwt.decode(token, env["JWT_SECRET"], algorithms=["HS256"])
                except jwt.InvalidTokenError:
                    raise HTTPException(401, "Could not validate credentials")
                return {"user": claims["sub"]}
            "#,
        ),
    ]);
    let (code, stdout, stderr) = run(
        &[
            "packages",
            "install",
            "--project",
            project.path().to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
        ],
        project.path(),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (code, stdout, stderr) = run(&["build"], project.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (code, stdout, stderr) = run(&["db", "migrate"], project.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");

    let key = "operator-given-jwt-secret-0123456789";
    let server = Server::run(&project, &[("JWT_SECRET", key)]);
    let login = |password: &str| {
        server
            .request("POST", "/token")
            .form(&[("username", "alice"), ("password", password)])
            .send()
            .unwrap()
    };
    assert_eq!(login("wrong").status(), 401);
    let response = login("hunter2-but-longer");
    assert_eq!(response.status(), 200, "{}", server.log());
    let token = json(response)["access_token"].as_str().unwrap().to_string();
    let me = server
        .request("GET", "/me")
        .header("authorization", format!("Bearer {token}"))
        .send()
        .unwrap();
    assert_eq!(json(me)["user"], "alice");
    // The native PyJWT, with the operator's secret, accepts the sandbox's token.
    let claims = run_tool(Command::new(&python).args([
        "-c",
        &format!(
            "import jwt, json; print(json.dumps(jwt.decode({token:?}, {key:?}, algorithms=['HS256'])))"
        ),
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(claims.contains("\"sub\": \"alice\""), "{claims}");
    assert_eq!(
        files_containing(project.path(), key, std::time::UNIX_EPOCH),
        Vec::<String>::new(),
        "the secret is in the project's files"
    );
}

// -- Redaction of every spelling (issue 40, item 4) ------------------------------------------

/// A secret with what escapes differently in every encoding: a backslash, both quotes,
/// non-ASCII (one above the BMP), a tab, a control character, `/`, `+`, a space, `&<>` and `%`.
const HARD: &str = "pw\\Backslash'Quote\"Dbl é😀\t\u{1}/+ &<>%x";
/// A secret with a single quote and no double quote: `repr` shows it in double quotes.
const HARD_SINGLE: &str = "it's\\another-secret é";

/// Route code that prints, logs and raises a secret in the spelling its path names, or, with
/// `?show=1`, returns that spelling (a response is the route's own, never redacted): the test
/// learns each spelling from real Python.
const SPELL: &str = r#"
import base64
import html
import json
import logging
import re
import urllib.parse

from filerouter import env


def lower_hex(text):
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def b64(encode, text, strip=False):
    out = encode(text.encode()).decode()
    return out.rstrip("=") if strip else out


SPELLINGS = {
    "raw": lambda v, w: v,
    "str": lambda v, w: f"{str(v)}",
    "repr": lambda v, w: repr(v),
    "repr_double_quoted": lambda v, w: repr(w),
    "repr_in_a_dict": lambda v, w: repr({"token": v}),
    "ascii": lambda v, w: ascii(v),
    "json": lambda v, w: json.dumps(v),
    "json_unicode": lambda v, w: json.dumps(v, ensure_ascii=False),
    "unicode_escape": lambda v, w: v.encode("unicode_escape").decode(),
    "bytes_repr": lambda v, w: repr(v.encode()),
    "repr_of_json": lambda v, w: repr(json.dumps({"token": v})),
    "quote": lambda v, w: urllib.parse.quote(v),
    "quote_no_safe": lambda v, w: urllib.parse.quote(v, safe=""),
    "quote_plus": lambda v, w: urllib.parse.quote_plus(v),
    "quote_lower_hex": lambda v, w: lower_hex(urllib.parse.quote_plus(v)),
    "urlencode": lambda v, w: urllib.parse.urlencode({"token": v}),
    "base64": lambda v, w: b64(base64.b64encode, v),
    "base64_unpadded": lambda v, w: b64(base64.b64encode, v, strip=True),
    "base64_urlsafe": lambda v, w: b64(base64.urlsafe_b64encode, v),
    "base64_urlsafe_unpadded": lambda v, w: b64(base64.urlsafe_b64encode, v, strip=True),
    "base64_basic_auth": lambda v, w: "Basic " + b64(base64.b64encode, "user:" + v),
    "html": lambda v, w: html.escape(v),
    "html_unquoted": lambda v, w: html.escape(v, quote=False),
}


def GET(request, kind: str):
    text = SPELLINGS[kind](env["PW"], env["PW2"])
    if request.query_params.get("show"):
        return {"text": text}
    print(f"printed {text}")
    logging.getLogger("app").warning("logged %s", text)
    raise ValueError(f"raised {text}")
"#;

/// `value` as the env file's double-quoted value.
fn env_quoted(value: &str) -> String {
    let escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\t', "\\t");
    format!("\"{escaped}\"")
}

fn spelling_project(startup: Option<&str>) -> Project {
    let mut files = vec![
        (
            "config.py",
            "environment = {'names': ['PW', 'PW2']}\n".to_string(),
        ),
        ("routes/spell/[kind]/route.py", SPELL.to_string()),
    ];
    if let Some(startup) = startup {
        files.push(("startup.py", startup.to_string()));
    }
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let project = Project::new(&files);
    project.write(
        ".env",
        &format!("PW={}\nPW2={}\n", env_quoted(HARD), env_quoted(HARD_SINGLE)),
    );
    project
}

/// `text` as the server's log shows guest output: control characters escaped.
fn as_logged(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Where `text` (a spelling of a secret) shows, in any form the server writes it: as it is,
/// as the log escapes it, as the HTML page escapes it, as JSON escapes it.
fn leaks(haystack: &str, text: &str) -> bool {
    let json = serde_json::to_string(text).unwrap();
    [
        text.to_string(),
        as_logged(text),
        html_escape::encode_text(text).into_owned(),
        json[1..json.len() - 1].to_string(),
    ]
    .iter()
    .any(|form| haystack.contains(form.as_str()))
}

/// Route code prints, logs and raises the secret in the spelling `kind`: the log (with the
/// traceback: debug level), the dev JSON error page and the HTML one show `[PW]` instead.
fn spelling_is_redacted(kind: &str) {
    let project = spelling_project(None);
    let server = Server::dev_with_env(&project, &[("RUST_LOG", "info,filerouter=debug")]);
    let shown = json(server.get(&format!("/spell/{kind}?show=1")));
    let text = shown["text"].as_str().unwrap().to_string();
    if kind != "raw" && kind != "str" {
        assert!(
            !text.contains(HARD) && !text.contains(HARD_SINGLE),
            "{kind}: {text}"
        );
    }

    let response = server.get(&format!("/spell/{kind}"));
    assert_eq!(response.status(), 500);
    let page = response.text().unwrap();
    let body: serde_json::Value = serde_json::from_str(&page).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(!leaks(&page, &text), "{kind}: {text}\n{page}");
    assert!(!message.contains(&text), "{kind}: {message}");
    assert!(message.starts_with("raised "), "{kind}: {message}");
    assert!(message.contains("[PW"), "{kind}: {message}");

    let html = server
        .request("GET", &format!("/spell/{kind}"))
        .header("accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(html.contains("raised "), "{kind}: {html}");
    assert!(!leaks(&html, &text), "{kind}: {text}\n{html}");

    assert!(server.log_shows("logged "), "{}", server.log());
    assert!(
        eventually(Duration::from_secs(20), || server
            .log()
            .contains("Traceback")),
        "{}",
        server.log()
    );
    let log = server.log();
    assert!(!leaks(&log, &text), "{kind}: {text}\n{log}");
    for what in ["printed ", "logged ", "raised "] {
        assert!(
            log.lines().any(|l| l.contains(what) && l.contains("[PW")),
            "{kind}: no {what}... [PW] in\n{log}"
        );
    }
}

macro_rules! spelling_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                spelling_is_redacted(&stringify!($name)["redacts_".len()..]);
            }
        )*
    };
}

spelling_tests!(
    redacts_raw,
    redacts_str,
    redacts_repr,
    redacts_repr_double_quoted,
    redacts_repr_in_a_dict,
    redacts_ascii,
    redacts_json,
    redacts_json_unicode,
    redacts_unicode_escape,
    redacts_bytes_repr,
    redacts_repr_of_json,
    redacts_quote,
    redacts_quote_no_safe,
    redacts_quote_plus,
    redacts_quote_lower_hex,
    redacts_urlencode,
    redacts_base64,
    redacts_base64_unpadded,
    redacts_base64_urlsafe,
    redacts_base64_urlsafe_unpadded,
    redacts_base64_basic_auth,
    redacts_html,
    redacts_html_unquoted,
);

/// A start-up hook that fails with the secret's `repr` in its message: `dev`'s log and the
/// error page every request gets show `[PW]`; `run` refuses to start, saying the same.
#[test]
fn a_startup_hooks_error_is_redacted_in_every_spelling() {
    let startup = r#"
import json
from filerouter import env

def startup():
    raise RuntimeError(f"bad {env['PW']!r} {json.dumps(env['PW2'])}")
"#;
    let project = spelling_project(Some(startup));
    let server = Server::dev_with_env(&project, &[("RUST_LOG", "info,filerouter=debug")]);
    let response = server.get("/spell/raw?show=1");
    assert_eq!(response.status(), 500);
    let page = response.text().unwrap();
    let html = server
        .request("GET", "/spell/raw?show=1")
        .header("accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(server.log_shows("StartupError"), "{}", server.log());
    let log = server.log();
    let repr = spelled("repr");
    let json_of_single = spelled("json_single");
    for (what, text) in [("page", &page), ("html", &html), ("log", &log)] {
        assert!(text.contains("bad '[PW]' "), "{what}: {text}");
        assert!(text.contains("[PW2]"), "{what}: {text}");
        assert!(!leaks(text, &repr), "{what}: {text}");
        assert!(!leaks(text, &json_of_single), "{what}: {text}");
    }
}

/// The spelling `kind` of the secrets, as route code of a project without a start-up hook
/// returns it.
fn spelled(kind: &str) -> String {
    let project = spelling_project(None);
    project.write(
        "routes/extra/route.py",
        r#"
import json
from filerouter import env

def GET(request):
    return {"repr": repr(env["PW"]), "json_single": json.dumps(env["PW2"])}
"#,
    );
    let server = Server::dev(&project);
    json(server.get("/extra"))[kind]
        .as_str()
        .unwrap()
        .to_string()
}

/// An env file hard-linked to another project's `.env` (a second name of the same file, which
/// no symlink check sees) is refused, naming the file; a copy of it, a symlink to a file inside
/// the project and a file saved by rename (as editors save) are read.
#[test]
fn an_env_file_hard_linked_to_another_projects_is_refused() {
    let other = project(&format!("JWT_SECRET={SECRET}\n"));
    let project = Project::new(&[("config.py", CONFIG), ("routes/show/route.py", SHOW)]);
    std::fs::hard_link(other.path().join(".env"), project.path().join(".env")).unwrap();
    let stderr = refused(&["dev", "--port", "0"], project.path());
    assert!(stderr.contains(".env"), "{stderr}");
    assert!(stderr.contains("2 hard links"), "{stderr}");
    assert!(!stderr.contains(SECRET), "{stderr}");

    // A file `environment['file']` names is checked the same way.
    let named = Project::new(&[
        (
            "config.py",
            "environment = {'names': ['JWT_SECRET'], 'file': 'secrets.env'}\n",
        ),
        ("routes/show/route.py", SHOW),
    ]);
    std::fs::hard_link(other.path().join(".env"), named.path().join("secrets.env")).unwrap();
    let stderr = refused(&["dev", "--port", "0"], named.path());
    assert!(stderr.contains("secrets.env"), "{stderr}");
    assert!(stderr.contains("hard links"), "{stderr}");

    // Neighbours that are read: a copy, a symlink inside the project, a file saved by rename.
    std::fs::remove_file(project.path().join(".env")).unwrap();
    std::fs::copy(other.path().join(".env"), project.path().join(".env")).unwrap();
    let server = Server::dev_with_env(&project, &[]);
    assert_eq!(json(server.get("/show"))["env"], SECRET);
    drop(server);

    std::fs::remove_file(project.path().join(".env")).unwrap();
    project.write("config/app.env", &format!("JWT_SECRET={OTHER}\n"));
    support::files::symlink(
        project.path().join("config/app.env"),
        &project.path().join(".env"),
    );
    let server = Server::dev_with_env(&project, &[]);
    assert_eq!(json(server.get("/show"))["env"], OTHER);
    drop(server);

    std::fs::remove_file(project.path().join(".env")).unwrap();
    project.write(".env", &format!("JWT_SECRET={SECRET}\n"));
    let server = Server::dev_with_env(&project, &[]);
    assert_eq!(json(server.get("/show"))["env"], SECRET);
    let saved = project.path().join(".env.tmp");
    std::fs::write(&saved, format!("JWT_SECRET={OTHER}\n")).unwrap();
    std::fs::rename(&saved, project.path().join(".env")).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || json(server.get("/show"))["env"]
            == OTHER),
        "{}",
        server.log()
    );
}
