//! The route scanner on generated folder trees: any names (brackets, groups, dots, Unicode,
//! private folders), any nesting, `route.py` / `index.py` anywhere. The scan and the table
//! built from it must never panic, and every route the table holds must be found again by a
//! path made from its own pattern.
#![no_main]

use arbitrary::Arbitrary;
use filerouter::routes::{Segment, scan, table::RouteTable};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Tree {
    /// Each entry: folder names from `routes/`, and which file it ends in.
    files: Vec<(Vec<String>, bool)>,
}

fn usable(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() < 64
        && !name.contains(['/', '\0'])
}

fuzz_target!(|tree: Tree| {
    let Ok(dir) = tempfile::tempdir() else { return };
    for (folders, index) in tree.files.iter().take(16) {
        if folders.len() > 6 || !folders.iter().all(|f| usable(f)) {
            continue;
        }
        let mut path = dir.path().to_path_buf();
        for folder in folders {
            path.push(folder);
        }
        if std::fs::create_dir_all(&path).is_err() {
            continue;
        }
        let _ = std::fs::write(path.join(if *index { "index.py" } else { "route.py" }), "");
    }
    let found = scan::scan(dir.path());
    let (table, _) = RouteTable::build(&found.routes);
    for route in &found.routes {
        let mut url = String::new();
        for segment in &route.pattern.0 {
            match segment {
                Segment::Static(name) => {
                    url.push('/');
                    url.push_str(&percent(name));
                }
                Segment::Param(_) | Segment::CatchAll(_) => url.push_str("/x"),
                Segment::OptionalCatchAll(_) => {}
            }
        }
        if url.is_empty() {
            url.push('/');
        }
        assert!(table.lookup(&url).is_some(), "{url} does not find {}", route.file);
    }
});

fn percent(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
