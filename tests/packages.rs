//! `filerouter packages install`: the project's pure-Python packages from PyPI, importable
//! from routes in `dev` (mounted read-only) and in `run` (baked into the build); native code
//! refused by name and reason.
//!
//! Needs Python with pip and PyPI (the pip of `tests/.venv`, see `support::tools`): skipped
//! loudly without them, a failure in CI.

mod support;

use std::process::Command;

use serde_json::json;
use support::{
    Project, Server, json, run, run_with_env,
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
    assert!(stdout.contains("typing_extensions"), "{stdout}");
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
