//! An Alembic history, kept once, run in the sandbox on SQLite (`dev`, `filerouter db`) and on
//! a real Postgres over TLS (`filerouter db migrate`, then two `run` processes), as a user
//! coming from FastAPI keeps one: `alembic init`, `revision --autogenerate` against the
//! project's SQLAlchemy models, an `ALTER TABLE` in the second revision, `downgrade`.
//!
//! The packages (SQLAlchemy, Alembic and Mako) come from PyPI through `filerouter packages
//! install`; the Postgres cluster is tests/data_tls.rs's (`ssl = on`, a test CA, `verify-full`).

use crate::backends;
use crate::data_tls::tls_postgres;
use crate::support::{self, Project, Server, eventually, json, run_with_env};

use std::{path::Path, time::Duration};

const MODELS: &str = r#"
import datetime

from sqlalchemy import DateTime, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Post(Base):
    __tablename__ = "posts"

    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(String(200))
    created: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True))
"#;

/// What the second revision adds to the model, as the user edits it.
const SUMMARY: &str = "    summary: Mapped[str | None] = mapped_column(String(500))\n";

const ROUTE: &str = r#"
import datetime

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from filerouter import db
from _lib.models import Post

engine = create_engine(db.url())


async def POST(request):
    body = await request.json()
    with Session(engine) as session:
        post = Post(created=datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc), **body)
        session.add(post)
        session.commit()
        return {"id": post.id}, 201


def GET(request):
    with Session(engine) as session:
        return [
            {"id": p.id, "title": p.title, "summary": p.summary, "day": p.created.date().isoformat()}
            for p in session.scalars(select(Post).order_by(Post.id))
        ]
"#;

/// `filerouter ARGS` for `project` (`--project` after the subcommand's words, `db migrate`
/// or `build`), to completion: exit code and output.
fn filerouter(project: &Path, args: &[&str]) -> (Option<i32>, String) {
    let words = if args[0] == "db" { 2 } else { 1 };
    let mut all = args[..words].to_vec();
    all.extend(["--project", project.to_str().unwrap()]);
    all.extend_from_slice(&args[words..]);
    backends::finish(&all, Duration::from_secs(300))
}

/// `filerouter db alembic ARGS` (no database URL: the data folder's SQLite).
fn alembic(project: &Path, args: &[&str]) -> String {
    let mut all = vec!["db", "alembic"];
    all.extend_from_slice(args);
    let (code, output) = filerouter(project, &all);
    assert_eq!(code, Some(0), "alembic {args:?}:\n{output}");
    output
}

/// The one revision file whose name ends with `slug.py`, and its text.
fn revision(project: &Path, slug: &str) -> (String, String) {
    let versions = project.join("alembic/versions");
    let found: Vec<_> = std::fs::read_dir(&versions)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(&format!("_{slug}.py")))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let text = std::fs::read_to_string(versions.join(&found[0])).unwrap();
    (found[0].clone(), text)
}

/// The revision id a revision file declares.
fn revision_id(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.starts_with("revision"))
        .expect("a revision line");
    line.split(['"', '\'']).nth(1).unwrap().to_string()
}

#[test]
fn one_alembic_history_runs_in_the_sandbox_on_sqlite_and_on_postgres_over_tls() {
    const TEST: &str = "one_alembic_history_runs_in_the_sandbox_on_sqlite_and_on_postgres_over_tls";
    let Some(tls) = tls_postgres() else { return };
    let venv = match support::tools::python_venv() {
        Ok(venv) => venv,
        Err(why) => {
            return support::tools::missing(TEST, &why, "python3 and python3-venv, and reach PyPI");
        }
    };
    let project = Project::dedented(&[
        ("requirements.txt", "SQLAlchemy==2.0.58\nalembic==1.20.1\n"),
        ("routes/_lib/models.py", MODELS),
        ("routes/posts/route.py", ROUTE),
    ]);
    let root = project.path();
    let python = venv.join("bin/python");
    let (code, stdout, stderr) = run_with_env(
        &[
            "packages",
            "install",
            "--project",
            ".",
            "--python",
            python.to_str().unwrap(),
        ],
        root,
        &[],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");

    // `alembic init alembic`, as the user would run it, then env.py pointed at the models.
    let output = alembic(root, &["init", "alembic"]);
    assert!(output.contains("wrote alembic/env.py"), "{output}");
    assert!(output.contains("wrote alembic.ini"), "{output}");
    let ini = std::fs::read_to_string(root.join("alembic.ini")).unwrap();
    assert!(ini.contains("script_location = %(here)s/alembic"), "{ini}");
    let env_py = std::fs::read_to_string(root.join("alembic/env.py")).unwrap();
    assert!(env_py.contains("target_metadata = None"), "{env_py}");
    project.write(
        "alembic/env.py",
        &env_py.replace(
            "target_metadata = None",
            "from _lib.models import Base\ntarget_metadata = Base.metadata",
        ),
    );

    // Two revisions autogenerated against the models: a table, then a column on it.
    let output = alembic(root, &["revision", "--autogenerate", "-m", "posts"]);
    let (file, first) = revision(root, "posts");
    let first_head = revision_id(&first);
    assert!(
        output.contains(&format!("wrote alembic/versions/{file}")),
        "{output}"
    );
    assert!(first.contains("op.create_table('posts'"), "{first}");
    // Autogenerate compares with the database: the first revision must be applied first.
    let (code, output) = filerouter(root, &["db", "migrate"]);
    assert_eq!(code, Some(0), "{output}");
    project.write(
        "routes/_lib/models.py",
        &format!("{}{SUMMARY}", support::dedent(MODELS)),
    );
    alembic(root, &["revision", "--autogenerate", "-m", "summary"]);
    let (second_file, second) = revision(root, "summary");
    assert!(second.contains("op.add_column('posts'"), "{second}");
    assert!(second.contains(&revision_id(&first)), "{second}");
    let head = revision_id(&second);

    // Down one and up again, and `db status` says where the database stands.
    let output = alembic(root, &["downgrade", "-1"]);
    assert!(output.contains("Running downgrade"), "{output}");
    let (code, status) = filerouter(root, &["db", "status"]);
    assert_eq!(code, Some(0), "{status}");
    assert!(status.contains(&format!("heads:     {head}")), "{status}");
    assert!(status.contains("pending:   alembic upgrade"), "{status}");
    let output = alembic(root, &["history"]);
    assert!(output.contains(&head), "{output}");

    // `dev` on SQLite applies the history at start and serves the models.
    let dev = Server::dev(&project);
    let created = dev
        .request("POST", "/posts")
        .json(&serde_json::json!({"title": "first", "summary": "one"}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201, "{}", dev.log());
    let on_sqlite = json(dev.get("/posts"));
    assert_eq!(
        on_sqlite,
        serde_json::json!([{"id": 1, "title": "first", "summary": "one", "day": "2026-11-29"}])
    );
    // A revision that fails is shown on every request with its file and line, and the
    // database keeps its state.
    let bad_rev = "badbadbad001";
    project.write(
        &format!("alembic/versions/{bad_rev}_broken.py"),
        &format!(
            "from alembic import op\n\nrevision = '{bad_rev}'\ndown_revision = '{head}'\nbranch_labels = None\ndepends_on = None\n\n\ndef upgrade():\n    op.execute('CREATE TABLE extra (id INTEGER PRIMARY KEY)')\n    op.execute('SELEC broken')\n\n\ndef downgrade():\n    pass\n"
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            let response = dev.get("/posts");
            response.status() == 500
                && response
                    .text()
                    .is_ok_and(|t| t.contains(&format!("alembic/versions/{bad_rev}_broken.py")))
        }),
        "{}",
        dev.log()
    );
    assert!(
        dev.log_shows(&format!("alembic/versions/{bad_rev}_broken.py:11")),
        "{}",
        dev.log()
    );
    project.remove(&format!("alembic/versions/{bad_rev}_broken.py"));
    assert!(
        eventually(Duration::from_secs(60), || dev.get("/posts").status()
            == 200),
        "{}",
        dev.log()
    );
    drop(dev);
    let (_, status) = filerouter(root, &["db", "status"]);
    assert!(
        status.contains(&format!("alembic:   at {head}")),
        "{status}"
    );

    // Postgres over TLS: a build refuses a database not at its heads, `db migrate` brings it
    // there with the same files, and two `run` processes serve what `dev` served.
    let (code, output) = filerouter(root, &["build"]);
    assert_eq!(code, Some(0), "{output}");
    tls.pg.create_app("alembicpg");
    let url = tls.url(
        "alembicpg",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", tls.ca_file.display()),
    );
    let port = support::free_port().to_string();
    let (code, output) = backends::finish(
        &[
            "run",
            "--project",
            root.to_str().unwrap(),
            "--database-url",
            &url,
            "--port",
            &port,
        ],
        Duration::from_secs(60),
    );
    assert!(matches!(code, Some(c) if c != 0), "{code:?} {output}");
    assert!(
        output.contains("not at the build's Alembic heads"),
        "{output}"
    );
    assert!(output.contains("filerouter db migrate"), "{output}");
    let (code, output) = filerouter(root, &["db", "migrate", "--database-url", &url]);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains(&format!("alembic: at {head}")), "{output}");
    backends::assert_no_password("db migrate", &output);
    let a = backends::run(root, &["--database-url", &url]);
    let b = backends::run(root, &["--database-url", &url]);
    let created = a
        .request("POST", "/posts")
        .json(&serde_json::json!({"title": "first", "summary": "one"}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201, "{}", a.log());
    assert_eq!(json(b.get("/posts")), on_sqlite);
    let columns = tls.pg.psql(
        "alembicpg",
        &["SELECT string_agg(column_name || ':' || data_type, ',' ORDER BY column_name) FROM information_schema.columns WHERE table_name = 'posts'"],
    );
    assert!(
        columns.contains("created:timestamp with time zone"),
        "{columns}"
    );
    assert!(columns.contains("summary:character varying"), "{columns}");
    let version = tls
        .pg
        .psql("alembicpg", &["SELECT version_num FROM alembic_version"]);
    assert_eq!(version.trim(), head);
    assert!(
        eventually(Duration::from_secs(20), || json(a.get("/posts"))
            == on_sqlite),
        "the other process does not see the row"
    );
    drop((a, b));

    tenants_keep_their_own_histories(root, &second_file, &head, &first_head);
}

/// Under `run --tenants`, two copies of the project as two tenants with histories of their own:
/// `one` keeps both revisions, `two` only the first (and models and a route without the
/// summary). Each has its own database and `alembic_version`: `two`, not migrated yet, is
/// refused by name while `one` serves; `db migrate` for it brings it to its own head, not
/// `one`'s, and it is served.
fn tenants_keep_their_own_histories(root: &Path, second_file: &str, head: &str, first_head: &str) {
    let site = tempfile::tempdir().unwrap();
    let (one, two) = (site.path().join("one"), site.path().join("two"));
    for dir in [&one, &two] {
        support::copy_all(root, dir);
        std::fs::remove_dir_all(dir.join(".data")).unwrap();
    }
    std::fs::remove_file(two.join("alembic/versions").join(second_file)).unwrap();
    std::fs::write(two.join("routes/_lib/models.py"), support::dedent(MODELS)).unwrap();
    std::fs::write(
        two.join("routes/posts/route.py"),
        support::dedent(&ROUTE.replace("\"summary\": p.summary, ", "")),
    )
    .unwrap();
    for dir in [&one, &two] {
        let (code, output) = filerouter(dir, &["build", "--force"]);
        assert_eq!(code, Some(0), "{}: {output}", dir.display());
    }
    let (code, output) = filerouter(&one, &["db", "migrate"]);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains(&format!("alembic: at {head}")), "{output}");
    std::fs::write(
        site.path().join("tenants.toml"),
        "[tenant.one]\nhosts = [\"one.test\"]\nproject = \"one\"\n\n\
         [tenant.two]\nhosts = [\"two.test\"]\nproject = \"two\"\n",
    )
    .unwrap();
    let toml = site.path().join("tenants.toml");
    let server = Server::start(
        &["run", "--tenants", toml.to_str().unwrap()],
        &[],
        Duration::from_secs(120),
    );
    let http = support::client();
    let post = |tenant: &str, title: &str| {
        http.post(server.url("/posts"))
            .header("host", format!("{tenant}.test"))
            .json(&serde_json::json!({ "title": title }))
            .send()
            .unwrap()
    };
    let get = |tenant: &str| {
        http.get(server.url("/posts"))
            .header("host", format!("{tenant}.test"))
            .send()
            .unwrap()
    };
    assert_eq!(post("one", "in one").status(), 201, "{}", server.log());
    assert_eq!(get("two").status(), 503, "{}", server.log());
    assert!(
        server.log_shows("not at the build's Alembic heads"),
        "{}",
        server.log()
    );
    let (code, output) = filerouter(&two, &["db", "migrate"]);
    assert_eq!(code, Some(0), "{output}");
    assert!(
        output.contains(&format!("alembic: at {first_head}")),
        "{output}"
    );
    // Served after its back-off (1 s, doubling while it was refused).
    assert!(
        eventually(Duration::from_secs(30), || get("two").status() == 200),
        "{}",
        server.log()
    );
    assert_eq!(post("two", "in two").status(), 201, "{}", server.log());
    assert_eq!(
        json(get("one")),
        serde_json::json!([{"id": 1, "title": "in one", "summary": null, "day": "2026-11-29"}])
    );
    assert_eq!(
        json(get("two")),
        serde_json::json!([{"id": 1, "title": "in two", "day": "2026-11-29"}])
    );
    // Each database stands at its own tenant's head, in Alembic's own table.
    for (dir, at) in [(&one, head), (&two, first_head)] {
        let db = rusqlite::Connection::open_with_flags(
            dir.join(".data/db.sqlite3"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let version: String = db
            .query_row("SELECT version_num FROM alembic_version", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(version, at, "{}", dir.display());
    }
}

/// Hostile files in `alembic/` (a link out of the project, to a file and to a folder, a FIFO,
/// a giant, too many files) and an `alembic.ini` pointing elsewhere: every command that reads
/// the history refuses it at once with the file's name and the reason, before any Python runs,
/// and `dev` shows the same on its error page (and keeps answering).
#[test]
fn hostile_history_files_are_refused_by_name_by_every_command() {
    let project = Project::dedented(&[
        (
            "routes/hello/route.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        ("alembic/env.py", "# the history's environment\n"),
        ("alembic/versions/0001_ok.py", "revision = '0001'\n"),
    ]);
    let root = project.path();
    let versions = root.join("alembic/versions");
    type Setup = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Setup, Setup, &str)> = vec![
        (
            "alembic/versions/link.py",
            Box::new(|v| std::os::unix::fs::symlink("/etc/passwd", v.join("link.py")).unwrap()),
            Box::new(|v| std::fs::remove_file(v.join("link.py")).unwrap()),
            "leads outside the project folder",
        ),
        (
            "alembic/versions/etc",
            Box::new(|v| std::os::unix::fs::symlink("/etc", v.join("etc")).unwrap()),
            Box::new(|v| std::fs::remove_file(v.join("etc")).unwrap()),
            "leads outside the project folder",
        ),
        (
            "alembic/versions/fifo.py",
            Box::new(|v| {
                let path = std::ffi::CString::new(v.join("fifo.py").to_str().unwrap()).unwrap();
                // SAFETY: a valid NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
            }),
            Box::new(|v| std::fs::remove_file(v.join("fifo.py")).unwrap()),
            "not a regular file (a FIFO)",
        ),
        (
            "alembic/versions/giant.py",
            Box::new(|v| {
                let file = std::fs::File::create(v.join("giant.py")).unwrap();
                file.set_len(70 << 20).unwrap();
            }),
            Box::new(|v| std::fs::remove_file(v.join("giant.py")).unwrap()),
            "bytes allowed for it",
        ),
        (
            "alembic/",
            Box::new(|v| {
                std::fs::create_dir(v.join("many")).unwrap();
                for n in 0..10_001 {
                    std::fs::write(v.join(format!("many/r{n}.py")), "").unwrap();
                }
            }),
            Box::new(|v| std::fs::remove_dir_all(v.join("many")).unwrap()),
            "more than 10000 files",
        ),
        (
            "alembic.ini: script_location = /etc",
            Box::new(|v| {
                let ini = v.join("../../alembic.ini");
                std::fs::write(ini, "[alembic]\nscript_location = /etc\n").unwrap();
            }),
            Box::new(|v| std::fs::remove_file(v.join("../../alembic.ini")).unwrap()),
            "move it there",
        ),
    ];
    for (named, make, unmake, reason) in &cases {
        make(&versions);
        for command in [
            &["db", "status"][..],
            &["db", "migrate"],
            &["db", "alembic", "history"],
            &["build"],
        ] {
            let (code, output) = filerouter(root, command);
            assert!(
                matches!(code, Some(c) if c != 0),
                "{command:?} with {named}: {code:?}\n{output}"
            );
            assert!(
                output.contains(named) && output.contains(reason),
                "{command:?} with {named}:\n{output}"
            );
            assert_eq!(
                output.lines().filter(|l| l.contains("error")).count(),
                1,
                "{command:?} with {named}: one line:\n{output}"
            );
        }
        unmake(&versions);
    }

    // `dev`: every request shows the FIFO by name (and the file, for the editor's link), and
    // the server answers at once, without reading it.
    let make = &cases[2].1;
    make(&versions);
    let dev = Server::dev(&project);
    let response = dev.get("/hello");
    assert_eq!(response.status(), 500);
    let page = json(response);
    assert_eq!(page["error"]["file"], "alembic/versions/fifo.py", "{page}");
    assert!(
        page["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a regular file (a FIFO)")),
        "{page}"
    );
}
