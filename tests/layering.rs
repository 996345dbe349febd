//! The request path imports one way (issue 25): no module between the socket and the sandbox
//! imports a module that imports it back, directly or through others.
//!
//! Read from the source, not run: every `crate::name` a module of `host/src/` mentions outside
//! comments and its `#[cfg(test)] mod tests` is an import of the top-level module `name`. The
//! sandbox's layer imports one way too (issue 28): settings (`config`) at the bottom, the
//! `sandbox` above them (and above `replay`), `plugins` and `tenants` above the sandbox; and no module anywhere
//! imports one that imports it back.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

/// The modules a request passes through, and those they use to answer it.
const REQUEST_PATH: [&str; 18] = [
    "server",
    "http_checks",
    "site",
    "tenants",
    "admin",
    "router",
    "app",
    "mode",
    "error_page",
    "public",
    "request_body",
    "response",
    "response_body",
    "write_timeout",
    "project",
    "catalog",
    "docs",
    "routes",
];

/// Top-level module -> the top-level modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = Graph::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).unwrap();
            let top = relative
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            if top == "main" || top == "lib" {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let deps = graph.entry(top.clone()).or_default();
            for dep in imports(&code_of(&source)) {
                if dep != top {
                    deps.insert(dep);
                }
            }
        }
    }
    graph
}

/// `source` without comment lines and without its test module.
fn code_of(source: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if !trimmed.starts_with("//") {
            kept.push(line);
        }
    }
    kept.join("\n")
}

/// The top-level modules `code` names after `crate::`, in paths and in `use crate::{...}`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The items of the group, at its top level: `app::{App, Loaded}, mode::Mode, ...`.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        found.insert(identifier(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = identifier(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// A way from `from` back to `to` through `graph`, if there is one.
fn way_back(graph: &Graph, from: &str, to: &str) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_string()]];
    while let Some(way) = stack.pop() {
        let last = way.last().unwrap();
        for next in graph.get(last).into_iter().flatten() {
            if next == to {
                let mut found = way.clone();
                found.push(next.clone());
                return Some(found);
            }
            if seen.insert(next.clone()) {
                let mut longer = way.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

/// Fail naming every way from one of `modules` back to itself.
fn assert_no_circles<'a>(graph: &Graph, modules: impl IntoIterator<Item = &'a str>) {
    let circles: Vec<String> = modules
        .into_iter()
        .filter_map(|module| way_back(graph, module, module))
        .map(|way| way.join(" -> "))
        .collect();
    assert!(
        circles.is_empty(),
        "imports that come back:\n  {}",
        circles.join("\n  ")
    );
}

#[test]
fn no_module_on_the_request_path_imports_one_that_imports_it_back() {
    let graph = graph();
    for module in REQUEST_PATH {
        assert!(graph.contains_key(module), "no module {module} in host/src");
    }
    assert_no_circles(&graph, REQUEST_PATH);
}

#[test]
fn no_module_anywhere_imports_one_that_imports_it_back() {
    let graph = graph();
    assert_no_circles(&graph, graph.keys().map(String::as_str));
}

#[test]
fn the_sandbox_layer_imports_downward() {
    let graph = graph();
    let reaches = |from: &str, to: &str| {
        way_back(&graph, from, to)
            .map(|way| way.join(" -> "))
            .unwrap_or_default()
    };
    // (lower, higher): the lower one never reaches the higher one.
    for (lower, higher) in [
        ("config", "sandbox"),
        ("config", "plugins"),
        ("config", "tenants"),
        ("sandbox", "plugins"),
        ("sandbox", "tenants"),
        ("plugins", "tenants"),
        // Recording and replay (issue 47): WIT values cross as JSON, so it needs no sandbox.
        ("replay", "sandbox"),
    ] {
        assert!(graph.contains_key(lower) && graph.contains_key(higher));
        let way = reaches(lower, higher);
        assert!(way.is_empty(), "{lower} imports {higher}: {way}");
    }
    // And the higher ones do use the lower ones (else the check above proves nothing).
    for (higher, lower) in [
        ("sandbox", "config"),
        ("plugins", "sandbox"),
        ("tenants", "sandbox"),
        ("sandbox", "replay"),
    ] {
        assert!(
            !reaches(higher, lower).is_empty(),
            "{higher} no longer uses {lower}"
        );
    }
}

#[test]
fn the_reader_sees_the_imports_it_must() {
    let code = code_of(
        "//! crate::doc_only\nuse crate::{\n    app::{App, Loaded},\n    mode::Mode,\n    response::{self, Body},\n};\nfn f() { crate::router::respond(); }\n// crate::commented\n#[cfg(test)]\nmod tests { use crate::tested; }\n",
    );
    assert_eq!(
        imports(&code).into_iter().collect::<Vec<_>>(),
        ["app", "mode", "response", "router"]
    );
}
