//! `filerouter packages install`: the project's pure-Python packages from PyPI, importable
//! from routes in `dev` (mounted read-only) and in `run` (baked into the build); native code
//! refused by name and reason.
//!
//! Needs Python with pip and PyPI (the pip of `tests/.venv`, see `support::tools`): skipped
//! loudly without them, a failure in CI.

use crate::support;

use std::{process::Command, time::Duration};

use serde_json::json;
use support::{
    Project, Server, eventually, json, run, run_with_env,
    tools::{missing, python_venv, run_tool},
};

/// A project whose route uses Jinja2 (with MarkupSafe), PyJWT and python-dateutil, listed in
/// pyproject.toml.
fn project() -> Project {
    Project::new(&[
        (
            "pyproject.toml",
            r#"
            [project]
            name = "uses-packages"
            version = "0.1.0"
            dependencies = ["Jinja2==3.1.6", "PyJWT==2.15.1", "python-dateutil==4.0.0"]
            "#,
        ),
        (
            "routes/index.py",
            r#"
            import jwt
            import markupsafe
            from dateutil import parser, relativedelta
            from jinja2 import Environment

            def GET(request, name: str = "<World>"):
                page = Environment(autoescape=True).from_string("<p>Hello {{ name }}</p>").render(name=name)
                token = jwt.encode({"sub": name}, "a-secret-of-thirty-two-bytes-or-more!", algorithm="HS256")
                claims = jwt.decode(token, "a-secret-of-thirty-two-bytes-or-more!", algorithms=["HS256"])
                when = parser.parse("3 March 2021 10:00")
                later = when + relativedelta.relativedelta(months=+1, weekday=relativedelta.FR(+1))
                return {
                    "page": page,
                    "sub": claims["sub"],
                    "later": later.isoformat(),
                    "escape_from": markupsafe._escape_inner.__module__,
                }
            "#,
        ),
    ])
}

fn install(project: &Project, python: &str) -> (i32, String, String) {
    run(
        &[
            "packages",
            "install",
            "--project",
            project.path().to_str().unwrap(),
            "--python",
            python,
        ],
        project.path(),
    )
}

#[test]
fn pypi_packages_work_from_routes_in_dev_and_run() {
    const TEST: &str = "pypi_packages_work_from_routes_in_dev_and_run";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let project = project();
    let python = venv.join("bin/python");
    let (code, stdout, stderr) = install(&project, python.to_str().unwrap());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // MarkupSafe's wheels carry a C speedup: it was built from source without it.
    assert!(
        stdout.contains(
            "MarkupSafe 3.0.4 (pure Python: built from source without its optional C extension)"
        ),
        "{stdout}"
    );
    for name in ["Jinja2 3.1.6", "PyJWT 2.15.1", "python-dateutil 4.0.0"] {
        assert!(stdout.contains(name), "{name}: {stdout}");
    }
    let native: Vec<String> = walk(&project.path().join(".packages"))
        .into_iter()
        .filter(|p| p.ends_with(".so") || p.contains(".so."))
        .collect();
    assert!(native.is_empty(), "native files installed: {native:?}");
    // Compiled to bytecode for the guest's CPython, beside each module, once.
    assert!(
        stdout.contains("compiled their ") && stdout.contains(" modules for the sandbox"),
        "{stdout}\n{stderr}"
    );
    let packages = project.path().join(".packages");
    assert!(
        packages
            .join("jwt/__pycache__/api_jwt.cpython-314.pyc")
            .is_file(),
        "{:?}",
        walk(&packages.join("jwt"))
    );
    // A module changed after the install is imported from its source, not its stale bytecode,
    // in `dev` (its snapshot of the packages, and imports from the folder) and in a build.
    let api = packages.join("jwt/api_jwt.py");
    let mut source = std::fs::read_to_string(&api).unwrap();
    source.push_str("\nFILEROUTER_EDITED = 'after the install'\n");
    std::fs::write(&api, source).unwrap();
    project.write(
        "routes/edited/route.py",
        "from jwt import api_jwt\n\ndef GET(request):\n    return {'edited': getattr(api_jwt, 'FILEROUTER_EDITED', None)}\n",
    );
    let edited = json!({"edited": "after the install"});

    let expected = json!({
        "page": "<p>Hello &lt;World&gt;</p>",
        "sub": "<World>",
        "later": "2021-04-09T10:00:00",
        "escape_from": "markupsafe._native",
    });
    {
        let dev = Server::dev(&project);
        let response = dev.get("/");
        assert_eq!(response.status(), 200, "{}", dev.log());
        assert_eq!(json(response), expected);
        assert_eq!(json(dev.get("/edited")), edited, "{}", dev.log());
        // The mount is read-only: a route cannot change the installed packages.
        project.write(
            "routes/write/route.py",
            "import jinja2, os\n\ndef GET(request):\n    try:\n        open(os.path.join(os.path.dirname(jinja2.__file__), 'x.py'), 'w')\n    except OSError as e:\n        return {'refused': type(e).__name__}\n    return {'refused': None}\n",
        );
        let refused = support::eventually(std::time::Duration::from_secs(10), || {
            dev.get("/write").status() == 200
        });
        assert!(refused);
        assert_ne!(json(dev.get("/write"))["refused"], serde_json::Value::Null);
        project.remove("routes/write/route.py");
    }
    let (code, stdout, stderr) = run(
        &["build", "--project", project.path().to_str().unwrap()],
        project.path(),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stderr.contains("files of .packages/"), "{stderr}");
    // `run` reads nothing but the cache: the packages were baked in.
    std::fs::remove_dir_all(project.path().join(".packages")).unwrap();
    let served = Server::run(&project, &[]);
    let response = served.get("/");
    assert_eq!(response.status(), 200, "{}", served.log());
    assert_eq!(json(response), expected);
    assert_eq!(json(served.get("/edited")), edited, "{}", served.log());
}

#[test]
fn a_package_with_native_code_is_refused_by_name() {
    const TEST: &str = "a_package_with_native_code_is_refused_by_name";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv"),
    };
    let project = Project::new(&[
        (
            "requirements.txt",
            "./wheels/fastthing-1.0-py3-none-any.whl\n",
        ),
        (".packages/keep.txt", "installed earlier\n"),
    ]);
    // A wheel that carries an extension module (its bytes do not matter: the sandbox can load
    // no native code at all, so the name is the evidence).
    let wheel = project.path().join("wheels/fastthing-1.0-py3-none-any.whl");
    std::fs::create_dir_all(wheel.parent().unwrap()).unwrap();
    let script = r#"
import sys, zipfile
files = {
    "fastthing/__init__.py": "from ._speed import go\n",
    "fastthing/_speed.cpython-311-x86_64-linux-gnu.so": "\x7fELF",
    "fastthing-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fastthing\nVersion: 1.0\n",
    "fastthing-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
}
record = "".join(f"{name},,\n" for name in files) + "fastthing-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
    z.writestr("fastthing-1.0.dist-info/RECORD", record)
"#;
    run_tool(
        Command::new(venv.join("bin/python"))
            .args(["-c", script])
            .arg(&wheel),
    )
    .unwrap();
    let (code, stdout, stderr) = install(&project, venv.join("bin/python").to_str().unwrap());
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains("fastthing 1.0"), "{stderr}");
    assert!(
        stderr.contains("native file fastthing/_speed.cpython-311-x86_64-linux-gnu.so"),
        "{stderr}"
    );
    assert!(stderr.contains("cannot load"), "{stderr}");
    // Nothing changed.
    assert!(project.path().join(".packages/keep.txt").exists());
    assert!(!project.path().join(".packages/fastthing").exists());
    assert!(!project.path().join(".packages.new").exists());

    // No requirements at all: a clear error.
    let empty = Project::new(&[]);
    let (code, _, stderr) = install(&empty, venv.join("bin/python").to_str().unwrap());
    assert_ne!(code, 0);
    assert!(stderr.contains("no requirements.txt"), "{stderr}");
}

/// A source distribution that needs a compiler (here one that runs `cargo`, as a Rust
/// extension's build does) is named, and refused, without anything being compiled: the
/// installer runs with every compiler replaced by a stand-in that fails at once (issue 24).
/// The sdist comes from the user's own pip configuration (`PIP_FIND_LINKS`), as one from
/// PyPI would: a source the project itself names is never built (see below).
#[test]
fn a_source_that_needs_a_compiler_is_refused_without_compiling() {
    const TEST: &str = "a_source_that_needs_a_compiler_is_refused_without_compiling";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let project = Project::new(&[(".packages/keep.txt", "installed earlier\n")]);
    let sdist = project.path().join("dist/filerouter_needsrust-1.0.tar.gz");
    let compiled = project.path().join("COMPILED");
    std::fs::create_dir_all(sdist.parent().unwrap()).unwrap();
    let setup = r#"
import subprocess
from setuptools import setup
from setuptools.command.build_py import build_py

class build_with_cargo(build_py):
    def run(self):
        subprocess.run(["cargo", "--version"], check=True)
        with open(MARKER, "w") as f:
            f.write("compiled")
        super().run()

setup(name="filerouter-needsrust", version="1.0", packages=["needsrust"], cmdclass={"build_py": build_with_cargo})
"#
    .replace("MARKER", &format!("{:?}", compiled.to_str().unwrap()));
    let script = r#"
import io, sys, tarfile
files = {
    "filerouter_needsrust-1.0/setup.py": sys.argv[2],
    "filerouter_needsrust-1.0/needsrust/__init__.py": "",
    "filerouter_needsrust-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: filerouter-needsrust\nVersion: 1.0\n",
}
with tarfile.open(sys.argv[1], "w:gz") as tar:
    for name, text in files.items():
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
"#;
    run_tool(
        Command::new(venv.join("bin/python"))
            .args(["-c", script])
            .arg(&sdist)
            .arg(&setup),
    )
    .unwrap();
    project.write("requirements.txt", "filerouter-needsrust==1.0\n");
    let find_links = format!(
        "{} {}",
        sdist.parent().unwrap().display(),
        std::env::var("PIP_FIND_LINKS").unwrap_or_default()
    );
    let (code, stdout, stderr) = run_with_env(
        &[
            "packages",
            "install",
            "--project",
            project.path().to_str().unwrap(),
            "--python",
            venv.join("bin/python").to_str().unwrap(),
        ],
        project.path(),
        // The user's own setting (pip reads a list of places from it), kept if there is one.
        &[("PIP_FIND_LINKS", &find_links)],
    );
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    // Said before the build, and named when it failed.
    assert!(
        stderr.contains(
            "needsrust 1.0: no wheel to install, so it is built from its source, without a compiler"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("a package needs a compiler to build from source"),
        "{stderr}"
    );
    assert!(
        stderr.contains("needsrust 1.0: it has no wheel, building it from source needs a compiler"),
        "{stderr}"
    );
    assert!(!compiled.exists(), "the build ran cargo: {stderr}");
    assert!(project.path().join(".packages/keep.txt").exists());
    assert!(!project.path().join(".packages/needsrust").exists());
    for scratch in [
        ".packages.new",
        ".packages.nocompilers",
        ".packages.resolve",
    ] {
        assert!(
            !project.path().join(scratch).exists(),
            "{scratch} left behind"
        );
    }
}

/// Environment markers are evaluated for the sandbox (CPython 3.14 on wasm32 WASI), not for the
/// machine that runs pip: SQLAlchemy 2.0 requires greenlet, which is native code, only
/// `platform_machine == "x86_64" or ...` (true here, false in the sandbox), so greenlet is left
/// out, with a word on why, instead of refused. SQLAlchemy's own wheel carries its optional
/// Cython extensions: that is said before it is built from source without them.
#[test]
fn requirements_are_resolved_for_the_sandbox_not_the_host() {
    const TEST: &str = "requirements_are_resolved_for_the_sandbox_not_the_host";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let project = Project::new(&[("requirements.txt", "SQLAlchemy==2.0.58\n")]);
    let (code, stdout, stderr) = install(&project, venv.join("bin/python").to_str().unwrap());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let packages = project.path().join(".packages");
    assert!(
        packages.join("sqlalchemy/__init__.py").is_file(),
        "{stdout}\n{stderr}"
    );
    let installed: Vec<String> = std::fs::read_dir(&packages)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_ascii_lowercase())
        .collect();
    assert!(
        !installed.iter().any(|name| name.starts_with("greenlet")),
        "greenlet installed: {installed:?}\n{stderr}"
    );
    assert!(stdout.contains("SQLAlchemy 2.0.58"), "{stdout}");
    // SQLAlchemy's typing-extensions is the one built into the guest with pydantic (issue 41):
    // routes import that copy whatever .packages/ holds, so it is not installed.
    assert!(!stdout.contains("typing_extensions"), "{stdout}");
    assert!(
        stderr.contains("typing-extensions 4.16.0: provided by the sandbox")
            && stderr.contains("`typing-extensions>=4.6.0` (SQLAlchemy's) allows it"),
        "{stderr}"
    );
    assert!(!stdout.contains("greenlet"), "{stdout}");
    let native: Vec<String> = walk(&packages)
        .into_iter()
        .filter(|p| p.ends_with(".so") || p.contains(".so."))
        .collect();
    assert!(native.is_empty(), "native files installed: {native:?}");
    // Said before anything was built.
    assert!(
        stderr.contains("SQLAlchemy 2.0.58: its wheel sqlalchemy-2.0.58-"),
        "{stderr}"
    );
    // pip on this machine resolves greenlet where SQLAlchemy's marker names its machine
    // (x86_64, aarch64 but not macOS's arm64, ...): then the skip is told.
    if cfg!(target_arch = "x86_64") || (cfg!(target_arch = "aarch64") && !cfg!(target_os = "macos"))
    {
        assert!(
            stderr.contains("greenlet")
                && stderr.contains("(SQLAlchemy's dependency): skipped, its marker `")
                && stderr.contains("is false in the sandbox"),
            "{stderr}"
        );
    }
    assert!(!project.path().join(".packages.resolve").exists());

    // And the ORM works in routes, in dev and from a build, on the project's database.
    project.write(
        "migrations/0001_blog.sql",
        "CREATE TABLE posts (id INTEGER PRIMARY KEY, title VARCHAR(200) NOT NULL UNIQUE);\n\
         CREATE TABLE comments (id INTEGER PRIMARY KEY, post_id INTEGER NOT NULL REFERENCES posts (id), body TEXT NOT NULL);\n",
    );
    project.write(
        "routes/_lib/models.py",
        r#"
        from sqlalchemy import ForeignKey, String, create_engine
        from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

        engine = create_engine("sqlite:///app.db")

        class Base(DeclarativeBase):
            pass

        class Post(Base):
            __tablename__ = "posts"
            id: Mapped[int] = mapped_column(primary_key=True)
            title: Mapped[str] = mapped_column(String(200), unique=True)
            comments: Mapped[list["Comment"]] = relationship(back_populates="post", order_by="Comment.id")

        class Comment(Base):
            __tablename__ = "comments"
            id: Mapped[int] = mapped_column(primary_key=True)
            post_id: Mapped[int] = mapped_column(ForeignKey("posts.id"))
            body: Mapped[str]
            post: Mapped[Post] = relationship(back_populates="comments")
        "#,
    );
    project.write(
        "routes/posts/route.py",
        r#"
        from sqlalchemy import func, select
        from sqlalchemy.exc import IntegrityError
        from sqlalchemy.orm import Session, selectinload
        from _lib.models import Comment, Post, engine

        async def POST(request):
            body = await request.json()
            with Session(engine) as session:
                post = Post(title=body["title"], comments=[Comment(body=c) for c in body["comments"]])
                session.add(post)
                try:
                    session.commit()
                except IntegrityError:
                    return {"detail": "a post with this title exists"}, 409
                return {"id": post.id}, 201

        def GET(request):
            with Session(engine) as session:
                posts = session.scalars(select(Post).options(selectinload(Post.comments)).order_by(Post.id)).all()
                total = session.scalar(select(func.count()).select_from(Comment))
                return {"posts": [{"id": p.id, "title": p.title, "comments": [c.body for c in p.comments]} for p in posts], "comments": total}
        "#,
    );
    let server = Server::dev(&project);
    let created = server
        .request("POST", "/posts")
        .json(&serde_json::json!({"title": "hello", "comments": ["first", "second"]}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201, "{}", server.log());
    let duplicate = server
        .request("POST", "/posts")
        .json(&serde_json::json!({"title": "hello", "comments": []}))
        .send()
        .unwrap();
    assert_eq!(duplicate.status(), 409);
    let expected = serde_json::json!({
        "posts": [{"id": 1, "title": "hello", "comments": ["first", "second"]}],
        "comments": 2,
    });
    assert_eq!(json(server.get("/posts")), expected);
    drop(server);
    let (code, _, stderr) = run(&["build", "--project", "."], project.path());
    assert_eq!(code, 0, "{stderr}");
    let server = Server::run(&project, &[]);
    assert_eq!(json(server.get("/posts")), expected);
    drop(server);

    // The build configures the mappers ahead of the requests (sandbox/warmup.py); one that
    // cannot be configured is still the request's error, with SQLAlchemy's words, and the
    // build and the other models are not disturbed.
    project.write(
        "routes/broken/route.py",
        r#"
        from sqlalchemy import ForeignKey
        from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship
        from _lib.models import engine

        class Other(DeclarativeBase):
            pass

        class Orphan(Other):
            __tablename__ = "orphans"
            id: Mapped[int] = mapped_column(primary_key=True)
            parent: Mapped["Nowhere"] = relationship()

        def GET(request):
            with Session(engine) as session:
                return {"orphans": session.query(Orphan).count()}
        "#,
    );
    let (code, _, stderr) = run(&["build", "--project", "."], project.path());
    assert_eq!(code, 0, "{stderr}");
    let server = Server::run(&project, &[]);
    assert_eq!(server.get("/broken").status(), 500);
    assert!(
        eventually(Duration::from_secs(20), || server.log().contains("Nowhere")),
        "{}",
        server.log()
    );
    assert_eq!(json(server.get("/posts")), expected);
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// A source the project names is never built on this machine, since building runs code it
/// holds (setup.py, a build backend): a local sdist, a source folder, an editable, a VCS URL,
/// a URL to an archive, and an index or find-links of the project's own are refused before
/// the installer runs, each named with its file and line. The sdist's setup.py would write a
/// marker file the moment it ran (even for metadata only): it never is.
#[test]
fn a_source_the_project_names_is_refused_before_any_of_its_code_runs() {
    const TEST: &str = "a_source_the_project_names_is_refused_before_any_of_its_code_runs";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv"),
    };
    let python = venv.join("bin/python");
    let project = Project::new(&[(".packages/keep.txt", "installed earlier\n")]);
    let marker = project.path().join("SETUP_PY_RAN");
    let setup = format!(
        "open({:?}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='evilpkg', version='1.0', packages=['evilpkg'])\n",
        marker.to_str().unwrap()
    );
    project.write("evilpkg-src/setup.py", &setup);
    project.write("evilpkg-src/evilpkg/__init__.py", "");
    let sdist = project.path().join("dist/evilpkg-1.0.tar.gz");
    std::fs::create_dir_all(sdist.parent().unwrap()).unwrap();
    let script = r#"
import io, sys, tarfile
files = {
    "evilpkg-1.0/setup.py": sys.argv[2],
    "evilpkg-1.0/evilpkg/__init__.py": "",
    "evilpkg-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n",
}
with tarfile.open(sys.argv[1], "w:gz") as tar:
    for name, text in files.items():
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
"#;
    run_tool(
        Command::new(&python)
            .args(["-c", script])
            .arg(&sdist)
            .arg(&setup),
    )
    .unwrap();
    let url = format!("file://{}", sdist.display());
    let cases: Vec<(&str, String, String)> = vec![
        (
            "requirements.txt",
            format!("Jinja2==3.1.6\nevilpkg @ {url}\n"),
            format!("requirements.txt:2: `evilpkg @ {url}`: a source archive"),
        ),
        (
            "requirements.txt",
            "./evilpkg-src\n".into(),
            "requirements.txt:1: `./evilpkg-src`: a source folder".into(),
        ),
        (
            "requirements.txt",
            "dist/evilpkg-1.0.tar.gz\n".into(),
            "requirements.txt:1: `dist/evilpkg-1.0.tar.gz`: a source archive".into(),
        ),
        (
            "requirements.txt",
            "-e ./evilpkg-src\n".into(),
            "requirements.txt:1: `-e ./evilpkg-src`: an editable install".into(),
        ),
        (
            "requirements.txt",
            "--find-links ./dist\nevilpkg==1.0\n".into(),
            "requirements.txt:1: `--find-links ./dist`: a package source the project names".into(),
        ),
        (
            "requirements.txt",
            "--index-url https://packages.example.com/simple\nevilpkg\n".into(),
            "`--index-url https://packages.example.com/simple`: a package source".into(),
        ),
        (
            "requirements.txt",
            "evilpkg @ git+https://example.com/evil/evilpkg.git@v1\n".into(),
            "`evilpkg @ git+https://example.com/evil/evilpkg.git@v1`: a VCS source".into(),
        ),
        (
            "requirements.txt",
            "-r more/reqs.txt\n".into(),
            "more/reqs.txt:1: `../evilpkg-src`: a source folder".into(),
        ),
        (
            "pyproject.toml",
            format!(
                "[project]\nname = \"p\"\nversion = \"1\"\ndependencies = [\"evilpkg @ {url}\"]\n"
            ),
            format!("pyproject.toml: `evilpkg @ {url}`: a source archive"),
        ),
    ];
    project.write("more/reqs.txt", "../evilpkg-src\n");
    for (file, text, expected) in cases {
        for other in ["requirements.txt", "pyproject.toml"] {
            let _ = std::fs::remove_file(project.path().join(other));
        }
        project.write(file, &text);
        let (code, stdout, stderr) = install(&project, python.to_str().unwrap());
        assert_ne!(code, 0, "{text}: {stdout}\n{stderr}");
        assert!(stderr.contains(&expected), "{text}: {stderr}");
        assert!(
            stderr.contains("nothing was installed; .packages/ is as it was"),
            "{stderr}"
        );
        assert!(!marker.exists(), "{text}: setup.py ran: {stderr}");
        assert!(project.path().join(".packages/keep.txt").exists());
        assert!(!project.path().join(".packages.resolve").exists());
    }
}

/// The pydantic built into the guest, and the pydantic-core compiled into it (the guest's build,
/// `guest-python/build/`, reads them from `host/guest-packages.txt`).
const PYDANTIC: &str = env!("FILEROUTER_PYDANTIC_VERSION");
const PYDANTIC_CORE: &str = env!("FILEROUTER_PYDANTIC_CORE_VERSION");

/// Whether `.packages/` holds any of the distributions built into the guest (their modules or
/// their `.dist-info`): none may be installed, they would shadow the guest's metadata (and
/// pydantic-core is native code).
fn bundled_installed(packages: &std::path::Path) -> Vec<String> {
    let bundled = [
        "pydantic",
        "pydantic_core",
        "typing_extensions",
        "annotated_types",
        "typing_inspection",
    ];
    std::fs::read_dir(packages)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().to_ascii_lowercase())
                .filter(|name| {
                    bundled.iter().any(|b| {
                        name == b
                            || *name == format!("{b}.py")
                            || name.starts_with(&format!("{b}-"))
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 41: a project that requires pydantic (a compatible range), pydantic-settings,
/// email-validator and SQLModel installs, with pydantic and what it imports provided by the
/// guest at its versions (said, and nothing of them installed: pydantic-core's wheels are
/// native code); and in `dev` and from a build, `BaseSettings` reads the project's env file or
/// the server's environment, `EmailStr` validates with the installed email-validator (pydantic
/// checks its version through `importlib.metadata`), a SQLModel table works on the project's
/// database, and `importlib.metadata` gives the guest's versions.
#[test]
fn pydantic_and_packages_built_on_it_install_and_use_the_guests_pydantic() {
    const TEST: &str = "pydantic_and_packages_built_on_it_install_and_use_the_guests_pydantic";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let project = Project::new(&[
        (
            "requirements.txt",
            "pydantic>=2.7\npydantic-settings\nemail-validator\nsqlmodel\n",
        ),
        ("config.py", r#"environment = {"names": ["APP_GREETING"]}"#),
        (".env", "APP_GREETING=hello from the env file\n"),
        (
            "migrations/0001_heroes.sql",
            "CREATE TABLE hero (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, secret_name VARCHAR NOT NULL, age INTEGER);\n",
        ),
        (
            "routes/settings/route.py",
            r#"
            import importlib.metadata

            from pydantic_settings import BaseSettings, SettingsConfigDict


            class Settings(BaseSettings):
                model_config = SettingsConfigDict(env_prefix="APP_")
                greeting: str
                page_size: int = 20


            def GET(request):
                settings = Settings()
                names = ("pydantic", "pydantic-core", "typing-extensions", "pydantic-settings", "email-validator")
                return {
                    "greeting": settings.greeting,
                    "page_size": settings.page_size,
                    "versions": {name: importlib.metadata.version(name) for name in names},
                    "owner": importlib.metadata.packages_distributions().get("pydantic"),
                    "files": sorted(str(f) for f in importlib.metadata.files("email-validator") if f.name == "__init__.py"),
                }
            "#,
        ),
        (
            "routes/email/route.py",
            r#"
            from pydantic import EmailStr, TypeAdapter, ValidationError

            EMAIL = TypeAdapter(EmailStr)


            def GET(request, address: str):
                try:
                    return {"email": EMAIL.validate_python(address)}
                except ValidationError as e:
                    return {"error": e.errors()[0]["type"], "msg": e.errors()[0]["msg"]}
            "#,
        ),
        (
            "routes/heroes/route.py",
            r#"
            from pydantic import ValidationError
            from sqlmodel import Field, Session, SQLModel, create_engine, select

            engine = create_engine("sqlite:///app.db")


            class Hero(SQLModel, table=True):
                id: int | None = Field(default=None, primary_key=True)
                name: str
                secret_name: str
                age: int | None = Field(default=None, ge=0)


            class HeroCreate(SQLModel):
                name: str = Field(min_length=1)
                secret_name: str
                age: int | None = Field(default=None, ge=0)


            async def POST(request):
                try:
                    data = HeroCreate.model_validate(await request.json())
                except ValidationError as e:
                    return {"detail": [(err["type"], err["loc"]) for err in e.errors()]}, 422
                with Session(engine) as session:
                    hero = Hero.model_validate(data)
                    session.add(hero)
                    session.commit()
                    session.refresh(hero)
                    return hero.model_dump(), 201


            def GET(request):
                with Session(engine) as session:
                    heroes = session.exec(select(Hero).where(Hero.age >= 18).order_by(Hero.id)).all()
                    return {"adults": [h.model_dump() for h in heroes]}
            "#,
        ),
    ]);
    let (code, stdout, stderr) = install(&project, venv.join("bin/python").to_str().unwrap());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // Said, with the requirements that allow it: the project's range, and its packages'.
    assert!(
        stderr.contains(&format!(
            "pydantic {PYDANTIC}: provided by the sandbox (its pydantic-core {PYDANTIC_CORE} is compiled into the guest), not installed; `pydantic>=2.7` (the project's), "
        )),
        "{stderr}"
    );
    for dependent in ["pydantic-settings's", "sqlmodel's"] {
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&format!("pydantic {PYDANTIC}: ")) && l.contains(dependent)),
            "{dependent}: {stderr}"
        );
    }
    assert!(
        stderr.contains(&format!(
            "pydantic-core {PYDANTIC_CORE}: provided by the sandbox (compiled for the sandbox from its source and linked into the guest), not installed"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("typing-extensions 4.16.0: provided by the sandbox (built into the guest with pydantic: routes import its copy, whatever .packages/ holds)"),
        "{stderr}"
    );
    for name in [
        "pydantic-settings",
        "email-validator",
        "sqlmodel",
        "SQLAlchemy",
    ] {
        assert!(stdout.contains(&format!("  {name} ")), "{name}: {stdout}");
    }
    let packages = project.path().join(".packages");
    assert_eq!(bundled_installed(&packages), Vec::<String>::new());
    assert!(!stdout.contains("pydantic "), "{stdout}");
    let native: Vec<String> = walk(&packages)
        .into_iter()
        .filter(|p| p.ends_with(".so") || p.contains(".so."))
        .collect();
    assert!(native.is_empty(), "native files installed: {native:?}");

    let check = |server: &Server, greeting: &str| {
        let settings = server.get("/settings");
        assert_eq!(settings.status(), 200, "{}", server.log());
        let settings = json(settings);
        assert_eq!(settings["greeting"], greeting);
        assert_eq!(settings["page_size"], 20);
        assert_eq!(settings["versions"]["pydantic"], PYDANTIC);
        assert_eq!(settings["versions"]["pydantic-core"], PYDANTIC_CORE);
        assert_eq!(settings["versions"]["typing-extensions"], "4.16.0");
        // The guest's top_level.txt, read from pydantic's RECORD; the installed files of a
        // project's package (from .packages/ in dev, from the build in run).
        assert_eq!(settings["owner"], json!(["pydantic"]));
        assert_eq!(settings["files"], json!(["email_validator/__init__.py"]));
        assert!(
            settings["versions"]["email-validator"]
                .as_str()
                .is_some_and(|v| v.starts_with("2.")),
            "{settings}"
        );
        let valid = server.get("/email?address=%20Someone@Example.COM%20");
        assert_eq!(valid.status(), 200, "{}", server.log());
        assert_eq!(json(valid), json!({"email": "Someone@example.com"}));
        let invalid = json(server.get("/email?address=no-at-sign"));
        assert_eq!(invalid["error"], "value_error", "{invalid}");
        assert!(
            invalid["msg"]
                .as_str()
                .unwrap()
                .starts_with("value is not a valid email address: "),
            "{invalid}"
        );
    };
    {
        let dev = Server::dev(&project);
        check(&dev, "hello from the env file");
        let created = dev
            .request("POST", "/heroes")
            .json(&json!({"name": "Deadpond", "secret_name": "Dive Wilson", "age": 30}))
            .send()
            .unwrap();
        assert_eq!(created.status(), 201, "{}", dev.log());
        assert_eq!(
            json(created),
            json!({"id": 1, "name": "Deadpond", "secret_name": "Dive Wilson", "age": 30})
        );
        // pydantic's lax mode: "15" is 15.
        let young = dev
            .request("POST", "/heroes")
            .json(&json!({"name": "Spider-Boy", "secret_name": "Pedro", "age": "15"}))
            .send()
            .unwrap();
        assert_eq!(young.status(), 201, "{}", dev.log());
        let invalid = dev
            .request("POST", "/heroes")
            .json(&json!({"name": "", "secret_name": "x", "age": -1}))
            .send()
            .unwrap();
        assert_eq!(invalid.status(), 422, "{}", dev.log());
        assert_eq!(
            json(invalid),
            json!({"detail": [["string_too_short", ["name"]], ["greater_than_equal", ["age"]]]})
        );
        assert_eq!(
            json(dev.get("/heroes")),
            json!({"adults": [{"id": 1, "name": "Deadpond", "secret_name": "Dive Wilson", "age": 30}]})
        );
    }
    // From a build: the packages and their metadata baked in, the server's environment first.
    let (code, stdout, stderr) = run(&["build", "--project", "."], project.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    std::fs::remove_dir_all(&packages).unwrap();
    let served = Server::run(&project, &[("APP_GREETING", "hello from the environment")]);
    check(&served, "hello from the environment");
    assert_eq!(
        json(served.get("/heroes")),
        json!({"adults": [{"id": 1, "name": "Deadpond", "secret_name": "Dive Wilson", "age": 30}]})
    );
}

/// Issue 41: a requirement that does not allow the guest's pydantic (or pydantic-core), the
/// project's own or a package's, is refused naming it, the guest's version and what to do,
/// and nothing is installed.
#[test]
fn a_requirement_on_another_pydantic_is_refused_by_name() {
    const TEST: &str = "a_requirement_on_another_pydantic_is_refused_by_name";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let python = venv.join("bin/python");
    let project = Project::new(&[(".packages/keep.txt", "installed earlier\n")]);
    let theirs = format!(
        "does not allow pydantic {PYDANTIC}, the sandbox's: change it to allow {PYDANTIC} (`pydantic>={PYDANTIC}`, or `pydantic` alone)"
    );
    let cases: Vec<(&str, &str, String)> = vec![
        (
            "requirements.txt",
            "Jinja2==3.1.6\npydantic==2.10.0\n",
            format!("`pydantic==2.10.0` (the project's requirement) {theirs}"),
        ),
        (
            "requirements.txt",
            "pydantic<2\n",
            format!("`pydantic<2` (the project's requirement) {theirs}"),
        ),
        (
            "requirements.txt",
            "sqlmodel==0.0.8\n",
            format!(
                "sqlmodel 0.0.8 requires `pydantic<2.0.0,>=1.8.2`, which does not allow pydantic {PYDANTIC}, the sandbox's: use a release of sqlmodel that works with pydantic {PYDANTIC}"
            ),
        ),
        (
            "pyproject.toml",
            "[project]\nname = \"p\"\nversion = \"1\"\ndependencies = [\"pydantic-core==2.27.2\"]\n",
            format!(
                "`pydantic-core==2.27.2` (the project's requirement) does not allow pydantic-core {PYDANTIC_CORE}, the sandbox's"
            ),
        ),
    ];
    for (file, text, expected) in cases {
        for other in ["requirements.txt", "pyproject.toml"] {
            let _ = std::fs::remove_file(project.path().join(other));
        }
        project.write(file, text);
        let (code, stdout, stderr) = install(&project, python.to_str().unwrap());
        assert_ne!(code, 0, "{text}: {stdout}\n{stderr}");
        assert!(stderr.contains(&expected), "{text}: {stderr}");
        assert!(
            stderr.contains("what the sandbox has built in, pydantic")
                && stderr.contains(&format!(
                    "{PYDANTIC} (its pydantic-core {PYDANTIC_CORE} is compiled into the guest)"
                ))
                || stderr.contains(&format!(
                    "pydantic-core {PYDANTIC_CORE} (compiled for the sandbox"
                )),
            "{text}: {stderr}"
        );
        assert!(
            stderr.contains("nothing was installed; .packages/ is as it was"),
            "{text}: {stderr}"
        );
        assert!(project.path().join(".packages/keep.txt").exists());
        assert_eq!(
            std::fs::read_dir(project.path().join(".packages"))
                .unwrap()
                .count(),
            1
        );
        for scratch in [
            ".packages.new",
            ".packages.resolve",
            ".packages.nocompilers",
        ] {
            assert!(
                !project.path().join(scratch).exists(),
                "{scratch} left behind"
            );
        }
    }
}

/// Writes a wheel of `name` `version` requiring `requires` into `dir` (pure Python, one empty
/// module), with the venv's Python.
fn fake_wheel(
    python: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    version: &str,
    requires: &[&str],
) {
    let script = r#"
import json, sys, zipfile
dir, name, version, requires = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
module = name.replace("-", "_")
info = f"{module}-{version}.dist-info"
files = {
    f"{module}/__init__.py": f"VERSION = {version!r}\n",
    f"{info}/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)),
    f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
with zipfile.ZipFile(f"{dir}/{module}-{version}-py3-none-any.whl", "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
    z.writestr(f"{info}/RECORD", record)
"#;
    run_tool(
        Command::new(python)
            .args(["-c", script])
            .arg(dir)
            .args([name, version])
            .arg(serde_json::to_string(requires).unwrap()),
    )
    .unwrap();
}

/// Issue 41: the resolution is held to the guest's pydantic, so a package that requires
/// pydantic resolves to its newest release that works with it, even when the package index
/// has a newer pydantic (here a pydantic 2.99.0 in the user's find-links, as PyPI will have
/// one day) that its newest release asks for; said, and no pydantic installed.
#[test]
fn packages_resolve_to_releases_that_work_with_the_guests_pydantic() {
    const TEST: &str = "packages_resolve_to_releases_that_work_with_the_guests_pydantic";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let python = venv.join("bin/python");
    let project = Project::new(&[("requirements.txt", "filerouter-on-pydantic\n")]);
    let links = project.path().join("links");
    std::fs::create_dir_all(&links).unwrap();
    fake_wheel(&python, &links, "pydantic", "2.99.0", &[]);
    fake_wheel(
        &python,
        &links,
        "filerouter-on-pydantic",
        "1.0",
        &["pydantic>=2.7"],
    );
    fake_wheel(
        &python,
        &links,
        "filerouter-on-pydantic",
        "2.0",
        &["pydantic>=2.99"],
    );
    let find_links = format!(
        "{} {}",
        links.display(),
        std::env::var("PIP_FIND_LINKS").unwrap_or_default()
    );
    let (code, stdout, stderr) = run_with_env(
        &[
            "packages",
            "install",
            "--project",
            project.path().to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
        ],
        project.path(),
        &[("PIP_FIND_LINKS", &find_links)],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("filerouter-on-pydantic 1.0"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "pydantic {PYDANTIC}: provided by the sandbox (its pydantic-core {PYDANTIC_CORE} is compiled into the guest), not installed; `pydantic>=2.7` (filerouter-on-pydantic's) allows it"
        )),
        "{stderr}"
    );
    assert_eq!(
        bundled_installed(&project.path().join(".packages")),
        Vec::<String>::new()
    );
}

/// Issue 41, with uv: held to the guest's versions by the same constraints, what uv installs of
/// them is removed (and said), and a requirement on another pydantic is refused with uv's
/// explanation.
#[test]
fn uv_is_held_to_the_guests_pydantic_too() {
    const TEST: &str = "uv_is_held_to_the_guests_pydantic_too";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    // tests/.venv has uv (tests/openapi/requirements.txt).
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let project = Project::new(&[
        ("requirements.txt", "pydantic>=2.7\nemail-validator\n"),
        (".packages/keep.txt", "installed earlier\n"),
    ]);
    let uv = |project: &Project| {
        run_with_env(
            &[
                "packages",
                "install",
                "--project",
                project.path().to_str().unwrap(),
                "--installer",
                "uv",
            ],
            project.path(),
            &[("PATH", &path)],
        )
    };
    project.write("requirements.txt", "pydantic==2.10.0\n");
    let (code, stdout, stderr) = uv(&project);
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "the requirements cannot be met with what the sandbox has built in, pydantic {PYDANTIC} (its pydantic-core {PYDANTIC_CORE} is compiled into the guest), which uv pip was held to"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("pydantic==2.10.0"), "{stderr}");
    assert!(
        stderr.contains("nothing was installed; .packages/ is as it was"),
        "{stderr}"
    );
    assert!(project.path().join(".packages/keep.txt").exists());

    project.write("requirements.txt", "pydantic>=2.7\nemail-validator\n");
    let (code, stdout, stderr) = uv(&project);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("email-validator 2."), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "pydantic {PYDANTIC}: provided by the sandbox (its pydantic-core {PYDANTIC_CORE} is compiled into the guest), not installed"
        )),
        "{stderr}"
    );
    let packages = project.path().join(".packages");
    assert_eq!(bundled_installed(&packages), Vec::<String>::new());
    assert!(packages.join("email_validator/__init__.py").is_file());
    let native: Vec<String> = walk(&packages)
        .into_iter()
        .filter(|p| p.ends_with(".so") || p.contains(".so."))
        .collect();
    assert!(native.is_empty(), "native files installed: {native:?}");
}
