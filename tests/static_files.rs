//! Static files from `public/`: content types, conditional GET, HEAD, streaming, precedence of
//! routes, and no way out of `public/`.

use crate::support;

use std::io::Read;

use support::{Project, Server, client, json};

fn site() -> Project {
    Project::new(&[
        (
            "routes/api/route.py",
            "def GET(request):\n    return {'route': True}\n",
        ),
        ("public/index.html", "<h1>home</h1>"),
        ("public/style.css", "body { color: red }"),
        ("public/app.js", "console.log(1)"),
        ("public/data.json", "{\"a\": 1}"),
        ("public/docs/guide.txt", "a guide"),
        ("public/api", "a file shadowed by the route /api"),
        ("public/a b.txt", "spaced"),
        ("public/.env", "SECRET=1"),
        ("secret.txt", "outside public"),
    ])
}

#[test]
fn files_are_served_with_content_types_and_validators() {
    let project = site();
    std::fs::write(
        project.path().join("public/logo.png"),
        [0x89, b'P', b'N', b'G'],
    )
    .unwrap();
    let server = Server::dev(&project);
    for (path, content_type, body) in [
        (
            "/style.css",
            "text/css; charset=utf-8",
            "body { color: red }",
        ),
        (
            "/app.js",
            "text/javascript; charset=utf-8",
            "console.log(1)",
        ),
        ("/data.json", "application/json", "{\"a\": 1}"),
        ("/docs/guide.txt", "text/plain; charset=utf-8", "a guide"),
        ("/a%20b.txt", "text/plain; charset=utf-8", "spaced"),
        ("/", "text/html; charset=utf-8", "<h1>home</h1>"),
    ] {
        let response = server.get(path);
        assert_eq!(response.status(), 200, "{path}");
        let ct = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            ct == content_type
                || (path == "/app.js" && ct == "application/javascript; charset=utf-8"),
            "{path}: {ct}"
        );
        assert!(response.headers().contains_key("etag"), "{path}");
        assert!(response.headers().contains_key("last-modified"), "{path}");
        // The fixture writer ends every file with a newline.
        assert_eq!(response.text().unwrap(), format!("{body}\n"), "{path}");
    }
    let png = server.get("/logo.png");
    assert_eq!(png.headers()["content-type"], "image/png");
    assert_eq!(png.bytes().unwrap().as_ref(), &[0x89, b'P', b'N', b'G']);
    // Routes come first.
    assert_eq!(json(server.get("/api")), serde_json::json!({"route": true}));
}

#[test]
fn conditional_get_and_head() {
    let project = site();
    let server = Server::dev(&project);
    let first = server.get("/style.css");
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    let modified = first.headers()["last-modified"]
        .to_str()
        .unwrap()
        .to_string();
    let by_etag = server
        .request("GET", "/style.css")
        .header("If-None-Match", &etag)
        .send()
        .unwrap();
    assert_eq!(by_etag.status(), 304);
    assert_eq!(by_etag.text().unwrap(), "");
    let by_date = server
        .request("GET", "/style.css")
        .header("If-Modified-Since", &modified)
        .send()
        .unwrap();
    assert_eq!(by_date.status(), 304);
    let other = server
        .request("GET", "/style.css")
        .header("If-None-Match", "\"something-else\"")
        .send()
        .unwrap();
    assert_eq!(other.status(), 200);
    // A changed file has a new validator.
    std::thread::sleep(std::time::Duration::from_millis(20));
    project.write("public/style.css", "body { color: blue; }");
    let changed = server
        .request("GET", "/style.css")
        .header("If-None-Match", &etag)
        .send()
        .unwrap();
    assert_eq!(changed.status(), 200);
    assert_eq!(changed.text().unwrap().trim(), "body { color: blue; }");
    let head = server.request("HEAD", "/data.json").send().unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "9");
    assert_eq!(head.text().unwrap(), "");
    // Only GET and HEAD read static files.
    assert_eq!(
        server
            .request("POST", "/style.css")
            .send()
            .unwrap()
            .status(),
        404
    );
}

#[test]
fn nothing_outside_public_can_be_reached() {
    let project = site();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("stolen.txt"), "outside the project").unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.path(), project.path().join("public/escape")).unwrap();
        std::os::unix::fs::symlink(
            project.path().join("secret.txt"),
            project.path().join("public/secret-link.txt"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", project.path().join("public/passwd")).unwrap();
    }
    let server = Server::dev(&project);
    let raw = |path: &str| -> (u16, String) {
        // reqwest would normalize `..`; send the request line as it is.
        use std::io::Write;
        let address = server.base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let status = text[9..12].parse().unwrap();
        (status, text)
    };
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/%2E%2E/etc/passwd",
        "/docs/..%2f..%2fsecret.txt",
        "/docs/%2e%2e/%2e%2e/secret.txt",
        "//etc/passwd",
        "/%2Fetc%2Fpasswd",
        "/escape/stolen.txt",
        "/secret-link.txt",
        "/passwd",
        "/.env",
        "/docs/..\\..\\secret.txt",
        "/%00",
    ] {
        let (status, text) = raw(path);
        assert_eq!(status, 404, "{path}:\n{text}");
        assert!(!text.contains("outside"), "{path} leaked:\n{text}");
        assert!(!text.contains("root:"), "{path} leaked:\n{text}");
        assert!(!text.contains("SECRET"), "{path} leaked:\n{text}");
    }
}

#[test]
fn large_files_stream_whole() {
    let project = site();
    let big: Vec<u8> = (0..48u32 * 1024 * 1024 / 4)
        .flat_map(|i| i.to_le_bytes())
        .collect();
    std::fs::write(project.path().join("public/big.bin"), &big).unwrap();
    let server = Server::dev(&project);
    let mut response = client().get(server.url("/big.bin")).send().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/octet-stream"
    );
    assert_eq!(
        response.headers()["content-length"],
        big.len().to_string().as_str()
    );
    let mut received = Vec::new();
    response.read_to_end(&mut received).unwrap();
    assert!(received == big, "the body differs");
}
