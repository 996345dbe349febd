//! Route lookup and percent-decoding on generated request paths: the table of a project with
//! every kind of segment, the static-file path check, and the trailing-slash rule. None may
//! panic; a path the static-file check accepts never leaves `public/`.
#![no_main]

use std::sync::OnceLock;

use filerouter::{
    public,
    routes::{scan, table::RouteTable},
};
use libfuzzer_sys::fuzz_target;

fn table() -> &'static RouteTable {
    static TABLE: OnceLock<RouteTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in [
            "index.py",
            "users/route.py",
            "users/[id]/route.py",
            "users/[id]/posts/[post_id]/route.py",
            "(admin)/settings/route.py",
            "docs/[...path]/route.py",
            "shop/[[...slug]]/route.py",
            "v1.2/status/route.py",
            "a b/%2F/route.py",
            "é/route.py",
        ] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, "").expect("write");
        }
        let found = scan::scan(dir.path());
        RouteTable::build(&found.routes).0
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else { return };
    if let Some(found) = table().lookup(path) {
        assert!(found.route < 10);
    }
    if path.len() > 1 && path.ends_with('/') {
        let _ = table().lookup(&path[..path.len() - 1]);
    }
    if let Some(relative) = public::relative_path(path) {
        for part in relative.split('/') {
            assert!(part != ".." && part != "." && !part.starts_with('.'), "{relative}");
            assert!(!part.contains(['\\', '\0', ':']), "{relative}");
        }
        assert!(!relative.starts_with('/'), "{relative}");
    }
});
