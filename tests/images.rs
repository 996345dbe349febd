//! Memory images in the shared cache folder are checked before they are mapped (issue 30,
//! point 4, for native code then; issue 28 made a project's snapshot a memory image): two
//! projects built by the real `filerouter build` into one `FILEROUTER_CACHE_DIR`; the image
//! file `run` maps for project A copied over B's name, cut short, or replaced by garbage. B
//! (alone with `run`, and beside A with `run --tenants`) must serve its own answers, log the
//! refusal, and leave B's file on disk as it was. A file trusted by its name would serve A's
//! snapshot and secret as B. B's image, built second and close to A's, is kept as a layer over
//! A's (`images/<hash>.layer`, signed with the user's key): the same substitutions of the layer,
//! and of A's whole image under it, are refused alike.

use crate::support;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Duration,
};

use support::{Server, eventually, json, run_with_env};

/// Project `NAME`'s only route: its name and a secret of its own, baked into its snapshot.
const INDEX: &str = r#"
SECRET = "NAME-secret"

def GET(request):
    return {"project": "NAME", "secret": SECRET}
"#;

/// The folder both projects were built in: `a/` and `b/` (each with its `.cache/`) and
/// `cache/`, the `FILEROUTER_CACHE_DIR` both builds used. Built once; each test copies it.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = support::lasting_tempdir();
            let cache = dir.join("cache");
            for name in ["a", "b"] {
                let project = dir.join(name);
                std::fs::create_dir_all(project.join("routes")).unwrap();
                std::fs::write(
                    project.join("routes/index.py"),
                    INDEX.replace("NAME", &name.to_uppercase()),
                )
                .unwrap();
                // One after the other: the first compiles the guest into the shared folder.
                let (code, stdout, stderr) = run_with_env(
                    &["build", "--project", "."],
                    &project,
                    &[("FILEROUTER_CACHE_DIR", cache.to_str().unwrap())],
                );
                assert_eq!(code, 0, "build of {name}:\n{stdout}\n{stderr}");
            }
            dir
        })
        .as_path()
}

/// A test's own copy of the built projects and of their shared cache folder.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        support::copy_all(built(), dir.path());
        Site { dir }
    }

    fn project(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// `filerouter ARGS`, with the shared cache folder.
    fn start(&self, args: &[&str]) -> Server {
        self.start_with(args, &[])
    }

    /// [`Site::start`] with more environment variables.
    fn start_with(&self, args: &[&str], env: &[(&str, &str)]) -> Server {
        let cache = self.cache().display().to_string();
        let mut env = env.to_vec();
        env.push(("FILEROUTER_CACHE_DIR", cache.as_str()));
        Server::start(args, &env, Duration::from_secs(120))
    }

    /// `filerouter run` of project `name`, with the shared cache folder.
    fn run(&self, name: &str) -> Server {
        let project = self.project(name);
        self.start(&["run", "--project", project.to_str().unwrap()])
    }

    /// `filerouter run --tenants` of both projects (`a.test`, `b.test`), at most one loaded at
    /// a time, so that every request to the other tenant loads it again.
    fn run_tenants(&self) -> Server {
        let config = self.dir.path().join("tenants.toml");
        std::fs::write(
            &config,
            support::dedent(
                r#"
                [server]
                max_loaded = 1

                [tenant.a]
                hosts = ["a.test"]
                project = "a"

                [tenant.b]
                hosts = ["b.test"]
                project = "b"
                "#,
            ),
        )
        .unwrap();
        self.start(&["run", "--tenants", config.to_str().unwrap()])
    }

    /// The memory images in the shared cache folder's `images/`.
    fn image_files(&self) -> BTreeSet<PathBuf> {
        std::fs::read_dir(self.cache().join("images"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "img" || e == "layer"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Replace `path` by `bytes` the way a copy onto a name in another shell does (`cp x.tmp`,
/// `mv x.tmp path`): a new file renamed over it, so a process that maps the old one keeps it.
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("substitute");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// What project `name` answers on `/`.
fn expected(name: &str) -> serde_json::Value {
    serde_json::json!({"project": name, "secret": format!("{name}-secret")})
}

/// The answer of `/` from `server`, as host `host` (none: the server's own).
fn answer(server: &Server, host: Option<&str>) -> serde_json::Value {
    let mut request = server.request("GET", "/");
    if let Some(host) = host {
        request = request.header("host", host);
    }
    let response = request.send().expect("GET /");
    assert_eq!(response.status(), 200, "{}", server.log());
    json(response)
}

/// How many times `server` logged that it refused the image file (or layer) at `path` for a
/// reason containing `why`.
fn refusals(server: &Server, path: &Path, why: &str) -> usize {
    let names = [
        format!("refusing memory image {}:", path.display()),
        format!("refusing memory image layer {}:", path.display()),
    ];
    server
        .log()
        .lines()
        .filter(|line| names.iter().any(|name| line.contains(name)) && line.contains(why))
        .count()
}

/// The image file of each project, named by the hash its build cache records (`build` wrote
/// it into the shared cache folder); `run` of each maps it and answers as the project. A's is
/// a whole image; B's, built second and differing from A's in a few pages, a layer over A's.
fn image_files_of_a_and_b(site: &Site) -> (PathBuf, PathBuf) {
    let mut named = Vec::new();
    for name in ["a", "b"] {
        let manifest =
            std::fs::read_to_string(site.project(name).join(".cache/manifest.json")).unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
        let hash = manifest["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "image")
            .and_then(|s| s["blake3"].as_str())
            .unwrap()
            .to_string();
        let kind = if name == "a" { "img" } else { "layer" };
        let file = site.cache().join("images").join(format!("{hash}.{kind}"));
        assert!(
            site.image_files().contains(&file),
            "{name}: no {} in {:?}",
            file.display(),
            site.image_files()
        );
        let server = site.run(name);
        assert_eq!(answer(&server, None), expected(&name.to_uppercase()));
        named.push(file);
    }
    let layer = std::fs::metadata(&named[1]).unwrap().len();
    assert!(
        layer < std::fs::metadata(&named[0]).unwrap().len() / 20,
        "B's layer is {layer} bytes"
    );
    (named[0].clone(), named[1].clone())
}

#[test]
fn run_refuses_another_image_under_its_name_and_serves_its_own() {
    let site = Site::new();
    let (a_file, b_file) = image_files_of_a_and_b(&site);
    let a_bytes = std::fs::read(&a_file).unwrap();
    let b_bytes = std::fs::read(&b_file).unwrap();
    assert_ne!(a_bytes, b_bytes);

    // A's image copied over B's layer, then B's layer cut short, then garbage: every time B
    // serves its own answer and secret, says which file it refused and why, and B's file is
    // B's again afterwards. Then the same for A's whole image, with B's layer as the
    // substitute.
    let cases = [
        ("b", "B", &b_file, &b_bytes, &a_bytes),
        ("a", "A", &a_file, &a_bytes, &b_bytes),
    ];
    for (name, upper, file, own, other) in cases {
        let substitutes: [(&str, &[u8]); 3] = [
            ("the other project's image", other),
            ("its own cut short", &own[..own.len() / 2]),
            ("garbage", b"garbage, not an image"),
        ];
        for (what, bytes) in substitutes {
            std::fs::write(file, bytes).unwrap();
            let server = site.run(name);
            assert_eq!(
                answer(&server, None),
                expected(upper),
                "with {what} under {upper}'s name"
            );
            assert_eq!(
                refusals(&server, file, "substituted or damaged"),
                1,
                "with {what} under {upper}'s name:\n{}",
                server.log()
            );
            assert!(
                std::fs::read(file).unwrap() == *own,
                "with {what}: {upper}'s file was not written again"
            );
        }
    }

    // A is untouched by all this, and B's good file is mapped without a word.
    let server = site.run("a");
    assert_eq!(answer(&server, None), expected("A"));
    let server = site.run("b");
    assert_eq!(answer(&server, None), expected("B"));
    assert!(!server.log().contains("refusing"), "{}", server.log());
}

#[test]
fn tenants_refuse_another_tenants_image_on_every_load() {
    let site = Site::new();
    let (a_file, b_file) = image_files_of_a_and_b(&site);
    let a_bytes = std::fs::read(&a_file).unwrap();
    let b_bytes = std::fs::read(&b_file).unwrap();

    // A's image copied over B's layer while no server runs: both tenants serve their own.
    std::fs::copy(&a_file, &b_file).unwrap();
    let server = site.run_tenants();
    assert_eq!(answer(&server, Some("b.test")), expected("B"));
    assert_eq!(answer(&server, Some("a.test")), expected("A"));
    assert_eq!(
        refusals(&server, &b_file, "substituted or damaged"),
        1,
        "{}",
        server.log()
    );
    assert!(std::fs::read(&b_file).unwrap() == b_bytes);

    // While the server runs: B is unloaded (A was loaded last, at most one at a time), its
    // file is replaced, and B's next request loads it again, checked again.
    let substitutes: [(&str, &[u8]); 3] = [
        ("A's image", &a_bytes),
        ("B's cut short", &b_bytes[..b_bytes.len() / 2]),
        ("garbage", b"garbage, not an image"),
    ];
    for (n, (what, bytes)) in substitutes.into_iter().enumerate() {
        replace(&b_file, bytes);
        assert_eq!(
            answer(&server, Some("b.test")),
            expected("B"),
            "with {what} under B's name"
        );
        assert!(
            eventually(Duration::from_secs(20), || refusals(
                &server,
                &b_file,
                "substituted or damaged"
            ) == n + 2),
            "with {what}:\n{}",
            server.log()
        );
        assert!(
            std::fs::read(&b_file).unwrap() == b_bytes,
            "with {what}: B's file was not written again"
        );
        assert_eq!(answer(&server, Some("a.test")), expected("A"));
    }
    assert_eq!(std::fs::read(&a_file).unwrap(), a_bytes);
}

#[test]
fn images_beyond_the_size_limit_go_least_recently_used_first_and_come_back() {
    let site = Site::new();
    let (a_file, b_file) = image_files_of_a_and_b(&site);
    for file in [&a_file, &b_file] {
        std::fs::remove_file(file).unwrap();
    }
    // A limit of 1 MiB, below one image: writing b's removes a's, which a running `run`
    // still maps and serves from.
    let limit = [("FILEROUTER_IMAGES_MAX_MB", "1")];
    let a = site.start_with(
        &["run", "--project", site.project("a").to_str().unwrap()],
        &limit,
    );
    assert_eq!(site.image_files(), BTreeSet::from([a_file.clone()]));
    let b = site.start_with(
        &["run", "--project", site.project("b").to_str().unwrap()],
        &limit,
    );
    assert_eq!(site.image_files(), BTreeSet::from([b_file.clone()]));
    assert_eq!(answer(&a, None), expected("A"));
    assert_eq!(answer(&b, None), expected("B"));
    drop(a);
    // The next start of a writes its image again from its build cache.
    let a = site.run("a");
    assert_eq!(answer(&a, None), expected("A"));
    assert!(site.image_files().contains(&a_file));
}
