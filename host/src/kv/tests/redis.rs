//! The Redis backend, on a real `redis-server` that each test starts (on a free port, without
//! persistence, in a temporary folder) and kills when it ends: the scenarios every backend
//! passes, then what only a shared server has (prefixes that keep stores apart, several handles
//! at once, a server that goes away).
//!
//! Without `redis-server` on the PATH a test says so and passes, unless `CI` is set: there it
//! fails, so that the backend is never left untested by accident.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use super::{super::*, scenarios};

/// The longest any one store operation may take here before the test calls it a hang.
const NO_HANG: Duration = Duration::from_secs(30);

/// A `redis-server` for one test, killed when dropped.
struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    binary: PathBuf,
    /// Stores made so far, for a fresh prefix each.
    made: AtomicUsize,
}

impl RedisServer {
    /// A server on a free port, answering PING; `None` (having said why) when there is no
    /// `redis-server` to run and the tests are not on CI.
    fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// The same, with `extra` arguments for `redis-server`.
    fn start_with(extra: &[&str]) -> Option<Self> {
        let Some(binary) = find_redis_server() else {
            if std::env::var_os("CI").is_some() {
                panic!("redis-server is not on the PATH: CI must install it to test the Redis kv");
            }
            println!("skipped: redis-server is not on the PATH (install it to test the Redis kv)");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary folder");
        // Another process may take the free port between our look and redis's bind: try again.
        for _ in 0..5 {
            let port = free_port();
            let mut child = spawn(&binary, port, dir.path(), extra);
            if wait_ready(&mut child, port) {
                return Some(RedisServer {
                    child,
                    port,
                    dir,
                    binary,
                    made: AtomicUsize::new(0),
                });
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A store under a prefix of its own.
    fn store(&self, bounds: Bounds) -> KvStore {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        KvStore::redis(&self.url(), &format!("filerouter:test{n}:"), bounds)
            .expect("a valid Redis URL")
    }

    /// Kill the server (SIGKILL: no goodbye to its clients) and wait for it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start the server again on the same port (empty: nothing was saved).
    fn restart(&mut self) {
        self.kill();
        self.child = spawn(&self.binary, self.port, self.dir.path(), &[]);
        assert!(
            wait_ready(&mut self.child, self.port),
            "redis-server did not restart"
        );
    }

    /// Every key on the server.
    async fn all_keys(&self) -> Vec<String> {
        let client = ::redis::Client::open(self.url()).expect("a valid URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let mut keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        keys.sort();
        keys
    }

    /// Run a command on the server.
    async fn command<T: ::redis::FromRedisValue>(&self, cmd: &mut ::redis::Cmd) -> T {
        let client = ::redis::Client::open(self.url()).expect("a valid URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        cmd.query_async(&mut conn).await.expect("a command")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn find_redis_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

fn spawn(binary: &std::path::Path, port: u16, dir: &std::path::Path, extra: &[&str]) -> Child {
    Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}

/// Wait (at most 10 s) until the server answers PING; false if it exited or never did.
fn wait_ready(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        if ping(port) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut answer = [0; 64];
    stream.write_all(b"PING\r\n").is_ok()
        && stream
            .read(&mut answer)
            .is_ok_and(|n| answer[..n].starts_with(b"+PONG") || answer[..n].starts_with(b"-NOAUTH"))
}

/// Run a scenario on stores of a fresh server.
macro_rules! scenario {
    ($name:ident) => {
        #[tokio::test]
        async fn $name() {
            let Some(server) = RedisServer::start() else {
                return;
            };
            scenarios::$name(&|bounds| server.store(bounds)).await;
        }
    };
}

scenario!(set_get_delete_and_expiry);
scenario!(incr_counts_and_refuses_non_integers);
scenario!(bounds_are_enforced_and_expired_keys_make_room);
scenario!(total_bytes_are_bounded_and_given_back);
scenario!(huge_ttls_are_refused_not_a_panic);
scenario!(compare_and_set_keys_and_write);
scenario!(incr_is_exact_and_keeps_the_ttl);
scenario!(expired_entries_are_absent_everywhere);
scenario!(long_ttls_within_bounds_work);

#[tokio::test]
async fn prefixes_keep_stores_apart() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let acme = KvStore::redis(&url, "filerouter:t:acme:", Bounds::default()).unwrap();
    let beta = KvStore::redis(&url, "filerouter:t:beta:", Bounds::default()).unwrap();
    acme.set("k", "1".into(), None).await.unwrap();
    acme.incr("n", 1, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    acme.write(vec![("w".into(), Some("2".into()))], None)
        .await
        .unwrap();
    assert_eq!(beta.keys("", None, 1000).await, Ok(vec![]));
    assert_eq!(beta.get("k").await, Ok(None));
    assert_eq!(beta.delete("k").await, Ok(false));
    beta.set("k", "\"beta\"".into(), None).await.unwrap();
    assert_eq!(acme.get("k").await.unwrap().as_deref(), Some("1"));
    assert_eq!(acme.keys("", None, 1000).await.unwrap(), ["k", "n", "w"]);
    // Route code's key names only ever follow the store's prefix (and `v:`), whatever they
    // look like: one that looks like another tenant's Redis key stays in its own store.
    beta.set("filerouter:t:acme:v:k", "\"x\"".into(), None)
        .await
        .unwrap();
    assert_eq!(acme.get("k").await.unwrap().as_deref(), Some("1"));
    for key in server.all_keys().await {
        assert!(
            key.starts_with("filerouter:t:acme:") || key.starts_with("filerouter:t:beta:"),
            "{key} is outside the stores' prefixes"
        );
    }
    // Each store's bounds count its own entries only.
    let small = KvStore::redis(
        &url,
        "filerouter:t:small:",
        Bounds {
            max_keys: 1,
            ..Bounds::default()
        },
    )
    .unwrap();
    small.set("a", "1".into(), None).await.unwrap();
    assert_eq!(
        small.set("b", "1".into(), None).await,
        Err(KvError::Full(1))
    );
}

#[tokio::test]
async fn handles_with_one_prefix_share_state_atomically() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let prefix = "filerouter:shared:";
    // Two handles, as two `filerouter run` processes would have.
    let first = Arc::new(KvStore::redis(&url, prefix, Bounds::default()).unwrap());
    let second = Arc::new(KvStore::redis(&url, prefix, Bounds::default()).unwrap());
    let mut tasks = Vec::new();
    for i in 0..20i64 {
        let kv = if i % 2 == 0 { &first } else { &second }.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                kv.incr("hits", i, None).await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(NO_HANG, task)
            .await
            .expect("no hang")
            .expect("the task ran");
    }
    let expected: i64 = (0..20).map(|i| i * 50).sum();
    assert_eq!(first.incr("hits", 0, None).await, Ok(expected));
    assert_eq!(
        second.get("hits").await.unwrap(),
        Some(expected.to_string())
    );
    // One compare_and_set among many wins.
    let mut tasks = Vec::new();
    for i in 0..20 {
        let kv = if i % 2 == 0 { &first } else { &second }.clone();
        tasks.push(tokio::spawn(async move {
            kv.compare_and_set("lock", None, Some(i.to_string()), None)
                .await
                .unwrap()
        }));
    }
    let mut winners = 0;
    for task in tasks {
        winners += usize::from(task.await.expect("the task ran"));
    }
    assert_eq!(winners, 1);
    // The bounds hold across handles: what one wrote counts for the other.
    let bounded = |kv: &KvStore| {
        kv.with_bounds(Bounds {
            max_keys: 2,
            ..Bounds::default()
        })
    };
    let (a, b) = (bounded(&first), bounded(&second));
    assert_eq!(a.set("x", "1".into(), None).await, Err(KvError::Full(2)));
    a.delete("lock").await.unwrap();
    a.set("x", "1".into(), None).await.unwrap();
    assert_eq!(b.set("y", "1".into(), None).await, Err(KvError::Full(2)));
}

#[tokio::test]
async fn a_refused_write_leaves_nothing() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limit = 2 * (ENTRY_OVERHEAD + 2) + ENTRY_OVERHEAD;
    let kv = server.store(Bounds {
        max_total_bytes: limit,
        ..Bounds::default()
    });
    kv.set("a", "1".into(), None).await.unwrap();
    let before = server.all_keys().await;
    // The third entry does not fit: neither do the first two, nor the delete.
    assert_eq!(
        kv.write(
            vec![
                ("b".into(), Some("1".into())),
                ("a".into(), None),
                ("c".into(), Some("1".into())),
                ("d".into(), Some("x".repeat(100))),
            ],
            None
        )
        .await,
        Err(KvError::FullBytes(limit))
    );
    assert_eq!(kv.keys("", None, 10).await.unwrap(), ["a"]);
    assert_eq!(server.all_keys().await, before);
    // Nor does a refused incr or compare_and_set.
    let full = server.store(Bounds {
        max_keys: 1,
        ..Bounds::default()
    });
    full.set("a", "1".into(), None).await.unwrap();
    assert_eq!(full.incr("n", 1, None).await, Err(KvError::Full(1)));
    assert_eq!(
        full.compare_and_set("c", None, Some("1".into()), None)
            .await,
        Err(KvError::Full(1))
    );
    assert_eq!(full.keys("", None, 10).await.unwrap(), ["a"]);
    assert_eq!(full.incr("a", 1, None).await, Ok(2));
}

#[tokio::test]
async fn the_accounting_matches_the_entries() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let prefix = "filerouter:acct:";
    let kv = KvStore::redis(&server.url(), prefix, Bounds::default()).unwrap();
    for i in 0..50 {
        let ttl = (i % 3 == 0).then(|| Duration::from_millis(1));
        kv.set(&format!("k{i}"), "v".repeat(i), ttl).await.unwrap();
    }
    kv.incr("n", 12345, None).await.unwrap();
    kv.compare_and_set("k1", Some("v".into()), Some("longer value".into()), None)
        .await
        .unwrap();
    kv.write(
        vec![("k2".into(), None), ("k4".into(), Some("\"four\"".into()))],
        None,
    )
    .await
    .unwrap();
    kv.delete("k5").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Enough writes for every expired entry to be dropped on the way.
    for i in 0..10 {
        kv.set(&format!("z{i}"), "1".into(), None).await.unwrap();
    }
    let keys: Vec<String> = server
        .command(
            ::redis::cmd("ZRANGE")
                .arg(format!("{prefix}idx"))
                .arg(0)
                .arg(-1),
        )
        .await;
    let live = kv.keys("", None, 1000).await.unwrap();
    assert_eq!(keys, live, "expired entries were all dropped");
    let mut bytes = 0;
    for key in &keys {
        let value = kv.get(key).await.unwrap().expect("a live key");
        bytes += cost(key, &value);
    }
    let stats: i64 = server
        .command(
            ::redis::cmd("HGET")
                .arg(format!("{prefix}stats"))
                .arg("bytes"),
        )
        .await;
    assert_eq!(stats, bytes as i64);
    let costs: usize = server
        .command(::redis::cmd("HLEN").arg(format!("{prefix}cost")))
        .await;
    assert_eq!(costs, keys.len());
    let expiring: usize = server
        .command(::redis::cmd("ZCARD").arg(format!("{prefix}exp")))
        .await;
    assert_eq!(expiring, 0);
}

#[tokio::test]
async fn a_server_that_goes_away_is_unavailable_then_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let kv = Arc::new(server.store(Bounds::default()));
    kv.set("k", "1".into(), None).await.unwrap();
    // Calls in flight when the server is killed end, with an error, and do not hang.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            loop {
                match kv.incr("n", 1, None).await {
                    Ok(_) if started.elapsed() < NO_HANG => continue,
                    Ok(_) => panic!("the server never went away"),
                    Err(e) => return e,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.kill();
    for task in tasks {
        let e = tokio::time::timeout(NO_HANG, task)
            .await
            .expect("no hang")
            .expect("no panic");
        assert!(matches!(e, KvError::Unavailable(_)), "{e:?}");
    }
    // While it is down, every operation says so, promptly.
    let started = Instant::now();
    for _ in 0..3 {
        let got = tokio::time::timeout(NO_HANG, kv.get("k"))
            .await
            .expect("no hang");
        assert!(matches!(got, Err(KvError::Unavailable(_))), "{got:?}");
        let got = tokio::time::timeout(NO_HANG, kv.set("k", "2".into(), None))
            .await
            .expect("no hang");
        assert!(matches!(got, Err(KvError::Unavailable(_))), "{got:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // Back (empty: it saved nothing), the same store connects again.
    server.restart();
    let got = tokio::time::timeout(NO_HANG, kv.incr("n", 1, None))
        .await
        .expect("no hang");
    assert_eq!(got, Ok(1));
}

#[tokio::test]
async fn connecting_is_lazy_and_errors_hide_the_password() {
    // No server on this port: making the store does not connect, an operation fails.
    let port = free_port();
    let url = format!("redis://user:hunter2secret@127.0.0.1:{port}/0");
    let kv = KvStore::redis(&url, "filerouter:t:", Bounds::default()).expect("parses only");
    let got = tokio::time::timeout(NO_HANG, kv.get("k"))
        .await
        .expect("no hang");
    match got {
        Err(KvError::Unavailable(message)) => assert!(!message.contains("hunter2"), "{message}"),
        other => panic!("{other:?}"),
    }
    // A URL that does not parse is refused at once, without its password.
    for bad in [
        "http://:hunter2secret@127.0.0.1:6379",
        "redis://:hunter2secret@127.0.0.1:6379/notadb",
        "redis://:hunter2secret@127.0.0.1:6379/0?ssl_ca_certs=/etc/ca.pem",
        "rediss://:hunter2secret@127.0.0.1:6379/0?ssl_ca_certs=/nonexistent/ca.pem",
        "not a url hunter2secret",
    ] {
        match KvStore::redis(bad, "filerouter:t:", Bounds::default()) {
            Err(KvError::Unavailable(message)) => {
                assert!(!message.contains("hunter2"), "{message}")
            }
            Err(e) => panic!("{bad}: {e:?}"),
            Ok(_) => panic!("{bad} was taken"),
        }
    }

    // TLS URLs are taken (the server's certificate is checked when it connects).
    assert!(
        KvStore::redis(
            "rediss://:hunter2secret@127.0.0.1:6379/0",
            "filerouter:t:",
            Bounds::default()
        )
        .is_ok()
    );

    // A server that wants a password: the wrong one is refused, without being shown.
    let Some(server) = RedisServer::start_with(&["--requirepass", "right-password"]) else {
        return;
    };
    let wrong = format!("redis://:wr0ng%2Ds3cret@127.0.0.1:{}", server.port);
    let kv = KvStore::redis(&wrong, "filerouter:t:", Bounds::default()).unwrap();
    match tokio::time::timeout(NO_HANG, kv.set("k", "1".into(), None))
        .await
        .expect("no hang")
    {
        Err(KvError::Unavailable(message)) => {
            assert!(!message.contains("wr0ng"), "{message}");
            assert!(!message.contains("s3cret"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let right = format!("redis://:right-password@127.0.0.1:{}", server.port);
    let kv = KvStore::redis(&right, "filerouter:t:", Bounds::default()).unwrap();
    kv.set("k", "1".into(), None).await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().as_deref(), Some("1"));
}
