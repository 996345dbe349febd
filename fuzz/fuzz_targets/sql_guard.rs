//! Route code's SQL, text and parameters of the fuzzer's choosing, through the guard and a
//! real SQLite database configured as the sandbox's (limits, the host's functions, the
//! authorizer, the counting VFS), on a database thread as in the server. Besides "no crash"
//! (a stack overflow aborts the process, which libFuzzer reports): the host's own table is
//! never changed or renamed, and no object with a host name appears.
#![no_main]

use std::{
    sync::{Arc, OnceLock, atomic::AtomicBool},
    time::{Duration, Instant},
};

use filerouter::db::{
    Allowance, Bounds, DbError, Params, Value,
    sqlite::{Store, Watch},
    threads,
};
use libfuzzer_sys::fuzz_target;

/// The input as text: statements separated by `\x01`; in each, the SQL, then its parameters
/// separated by `\x02` (a number is an integer, `~` NULL, `#` and hex a blob, else text); a
/// statement starting with `!` runs as a script. Seeds are thus plain text files.
struct Statement {
    sql: String,
    params: Vec<Value>,
    script: bool,
}

fn parse(data: &[u8]) -> Vec<Statement> {
    let text = String::from_utf8_lossy(data);
    text.split('\x01')
        .take(8)
        .map(|part| {
            let mut pieces = part.split('\x02');
            let sql = pieces.next().unwrap_or_default();
            let (script, sql) = match sql.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, sql),
            };
            let params = pieces
                .map(|p| {
                    if p == "~" {
                        Value::Null
                    } else if let Ok(i) = p.parse::<i64>() {
                        Value::Integer(i)
                    } else if let Some(hex) = p.strip_prefix('#') {
                        Value::Blob(hex.bytes().collect())
                    } else {
                        Value::Text(p.to_string())
                    }
                })
                .collect();
            Statement {
                sql: sql.to_string(),
                params,
                script,
            }
        })
        .collect()
}

fn store() -> &'static Store {
    static STORE: OnceLock<(tempfile::TempDir, Store)> = OnceLock::new();
    &STORE
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let bounds = Bounds {
                max_size_bytes: 64 << 20,
                max_temp_bytes: 64 << 20,
                max_memory_bytes: 16 << 20,
                ..Bounds::default()
            };
            let store = Store::file(&dir.path().join("db.sqlite3"), bounds).expect("store");
            let mut host = store.checkout(None).expect("host connection");
            host.trusted(|raw| {
                raw.execute_batch(
                    "CREATE TABLE IF NOT EXISTS _filerouter_marker (value TEXT);
                     DELETE FROM _filerouter_marker;
                     INSERT INTO _filerouter_marker VALUES ('intact');
                     CREATE TABLE IF NOT EXISTS posts (id INTEGER PRIMARY KEY, body TEXT);",
                )
                .map_err(|e| DbError::Unavailable(e.to_string()))
            })
            .expect("set up");
            drop(host);
            (dir, store)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let statements = parse(data);
    let store = store();
    threads::run_blocking(move || {
        let watch = Watch {
            deadline: Instant::now() + Duration::from_millis(500),
            cancelled: Arc::new(AtomicBool::new(false)),
            budget: None,
        };
        if let Ok(mut conn) = store.checkout(Some(watch)) {
            let mut allowance = Allowance {
                rows: 10_000,
                bytes: 8 << 20,
            };
            for statement in &statements {
                if statement.script {
                    let _ = conn.execute_script(&statement.sql);
                    continue;
                }
                let params = Params::Positional(statement.params.clone());
                let _ = conn.execute(&statement.sql, &params, None, &mut allowance);
            }
        }
        // The host's table is as the host left it, under its own name, and alone.
        let mut host = store.checkout(None).expect("host connection");
        let (marker, host_named) = host
            .trusted(|raw| {
                let marker: String = raw
                    .query_row("SELECT group_concat(value) FROM _filerouter_marker", [], |r| {
                        r.get(0)
                    })
                    .map_err(|e| DbError::Unavailable(e.to_string()))?;
                let named: i64 = raw
                    .query_row(
                        "SELECT count(*) FROM sqlite_schema WHERE lower(substr(name, 1, 12)) = '_filerouter_'",
                        [],
                        |r| r.get(0),
                    )
                    .map_err(|e| DbError::Unavailable(e.to_string()))?;
                Ok((marker, named))
            })
            .expect("the host's table is readable");
        assert_eq!(marker, "intact");
        assert_eq!(host_named, 1, "route code made an object with a host name");
    })
    .expect("a database thread");
});
