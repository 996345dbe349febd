//! The route table: a tree of URL patterns and the lookup of a request path in it.
//!
//! Lookup follows DECISIONS.md's precedence: among all routes that match the whole path, the
//! most specific wins, compared segment by segment from the left (static > `[param]` >
//! `[...param]` > `[[...param]]`). The tree is searched depth first in that order, so the
//! first full match is the most specific one, whatever order the files were found in.

use std::collections::BTreeMap;

use percent_encoding::percent_decode_str;

use super::{Segment, scan::RouteFile, scan::ScanError};

/// A captured path parameter's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Captured {
    /// From `[name]`: one decoded segment.
    One(String),
    /// From `[...name]` or `[[...name]]`: the remaining decoded segments.
    Many(Vec<String>),
}

/// A successful lookup: which route, and its parameters in URL order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Index into the route list the table was built from.
    pub route: usize,
    pub params: Vec<(String, Captured)>,
}

#[derive(Debug, Clone, Default)]
struct Node {
    route: Option<usize>,
    statics: BTreeMap<String, Node>,
    param: Option<Box<(String, usize, Node)>>,
    catch_all: Option<(String, usize)>,
    optional_catch_all: Option<(String, usize)>,
}

/// The routes of a project, arranged for lookup.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    root: Node,
    files: Vec<String>,
}

impl RouteTable {
    /// Build the table. Routes that conflict with an earlier one are left out and reported.
    pub fn build(routes: &[RouteFile]) -> (Self, Vec<ScanError>) {
        let mut table = RouteTable {
            root: Node::default(),
            files: routes.iter().map(|r| r.file.clone()).collect(),
        };
        let mut errors = Vec::new();
        for (index, route) in routes.iter().enumerate() {
            if let Err(e) = table.insert(index, route) {
                errors.push(e);
            }
        }
        (table, errors)
    }

    fn insert(&mut self, index: usize, route: &RouteFile) -> Result<(), ScanError> {
        let files = &self.files;
        let url = route.pattern.to_string();
        let duplicate = |other: usize| ScanError::DuplicateRoute {
            url: url.clone(),
            first: files[other].clone(),
            second: route.file.clone(),
        };
        let rename = |other: usize, other_name: &str, name: &str| ScanError::DynamicNameConflict {
            first: files[other].clone(),
            first_name: other_name.to_string(),
            second: route.file.clone(),
            second_name: name.to_string(),
        };
        let mut node = &mut self.root;
        for segment in &route.pattern.0 {
            match segment {
                Segment::Static(name) => node = node.statics.entry(name.clone()).or_default(),
                Segment::Param(name) => {
                    let slot = node
                        .param
                        .get_or_insert_with(|| Box::new((name.clone(), index, Node::default())));
                    if slot.0 != *name {
                        return Err(rename(slot.1, &slot.0, name));
                    }
                    node = &mut slot.2;
                }
                Segment::CatchAll(name) => {
                    if let Some((other_name, other)) = &node.catch_all {
                        return Err(if other_name == name {
                            duplicate(*other)
                        } else {
                            rename(*other, other_name, name)
                        });
                    }
                    node.catch_all = Some((name.clone(), index));
                    return Ok(());
                }
                Segment::OptionalCatchAll(name) => {
                    if let Some((other_name, other)) = &node.optional_catch_all {
                        return Err(if other_name == name {
                            duplicate(*other)
                        } else {
                            rename(*other, other_name, name)
                        });
                    }
                    // `[[...p]]` also matches the folder's own URL.
                    if let Some(other) = node.route {
                        return Err(duplicate(other));
                    }
                    node.optional_catch_all = Some((name.clone(), index));
                    return Ok(());
                }
            }
        }
        if let Some(other) = node.route.or(node.optional_catch_all.as_ref().map(|o| o.1)) {
            return Err(duplicate(other));
        }
        node.route = Some(index);
        Ok(())
    }

    /// Find the route for a request path (still percent-encoded, starting with `/`).
    ///
    /// Each segment is percent-decoded once, after splitting, so `%2F` stays inside its
    /// segment. A path with an empty segment (`/a//b`, or a trailing `/`) matches nothing.
    pub fn lookup(&self, path: &str) -> Option<Match> {
        let rest = path.strip_prefix('/')?;
        let mut segments = Vec::new();
        if !rest.is_empty() {
            for raw in rest.split('/') {
                if raw.is_empty() {
                    return None;
                }
                segments.push(percent_decode_str(raw).decode_utf8().ok()?.into_owned());
            }
        }
        let mut params = Vec::new();
        let route = find(&self.root, &segments, &mut params)?;
        Some(Match { route, params })
    }
}

fn find(node: &Node, segments: &[String], params: &mut Vec<(String, Captured)>) -> Option<usize> {
    let Some((first, rest)) = segments.split_first() else {
        if let Some(route) = node.route {
            return Some(route);
        }
        let (name, route) = node.optional_catch_all.as_ref()?;
        params.push((name.clone(), Captured::Many(Vec::new())));
        return Some(*route);
    };
    if let Some(child) = node.statics.get(first)
        && let Some(route) = find(child, rest, params)
    {
        return Some(route);
    }
    if let Some(param) = &node.param {
        params.push((param.0.clone(), Captured::One(first.clone())));
        if let Some(route) = find(&param.2, rest, params) {
            return Some(route);
        }
        params.pop();
    }
    let (name, route) = node
        .catch_all
        .as_ref()
        .or(node.optional_catch_all.as_ref())?;
    params.push((name.clone(), Captured::Many(segments.to_vec())));
    Some(*route)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::Pattern;

    fn seg(s: &str) -> Segment {
        if let Some(n) = s.strip_prefix("[[...").and_then(|n| n.strip_suffix("]]")) {
            Segment::OptionalCatchAll(n.into())
        } else if let Some(n) = s.strip_prefix("[...").and_then(|n| n.strip_suffix(']')) {
            Segment::CatchAll(n.into())
        } else if let Some(n) = s.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            Segment::Param(n.into())
        } else {
            Segment::Static(s.into())
        }
    }

    fn table(patterns: &[&str]) -> (RouteTable, Vec<ScanError>) {
        let routes: Vec<RouteFile> = patterns
            .iter()
            .map(|p| RouteFile {
                file: format!("{p}/route.py"),
                pattern: Pattern(p.split('/').filter(|s| !s.is_empty()).map(seg).collect()),
            })
            .collect();
        RouteTable::build(&routes)
    }

    fn file(t: &RouteTable, path: &str) -> Option<String> {
        t.lookup(path).map(|m| t.files[m.route].clone())
    }

    #[test]
    fn static_beats_param_beats_catch_all() {
        let (t, errors) = table(&[
            "users/me",
            "users/[id]",
            "users/[...rest]",
            "users/[[...all]]",
            "[x]/me",
        ]);
        assert!(errors.is_empty());
        assert_eq!(file(&t, "/users/me").as_deref(), Some("users/me/route.py"));
        assert_eq!(
            file(&t, "/users/42").as_deref(),
            Some("users/[id]/route.py")
        );
        assert_eq!(
            file(&t, "/users/42/x").as_deref(),
            Some("users/[...rest]/route.py")
        );
        assert_eq!(
            file(&t, "/users").as_deref(),
            Some("users/[[...all]]/route.py")
        );
        assert_eq!(file(&t, "/other/me").as_deref(), Some("[x]/me/route.py"));
    }

    #[test]
    fn precedence_does_not_depend_on_order() {
        let a = ["a/[x]/c", "[y]/b/c", "a/b/[z]"];
        let mut b = a;
        b.reverse();
        for patterns in [a, b] {
            let (t, errors) = table(&patterns);
            assert!(errors.is_empty());
            assert_eq!(file(&t, "/a/b/c").as_deref(), Some("a/b/[z]/route.py"));
            assert_eq!(file(&t, "/a/q/c").as_deref(), Some("a/[x]/c/route.py"));
            assert_eq!(file(&t, "/q/b/c").as_deref(), Some("[y]/b/c/route.py"));
        }
    }

    #[test]
    fn backtracks_to_a_less_specific_branch() {
        let (t, _) = table(&["a/b/c", "a/[x]/d"]);
        let m = t.lookup("/a/b/d").unwrap();
        assert_eq!(t.files[m.route], "a/[x]/d/route.py");
        assert_eq!(m.params, vec![("x".into(), Captured::One("b".into()))]);
    }

    #[test]
    fn catch_alls_capture_segments() {
        let (t, _) = table(&["docs/[...path]", "shop/[[...slug]]"]);
        assert_eq!(t.lookup("/docs"), None);
        let m = t.lookup("/docs/a/b%20c/d").unwrap();
        assert_eq!(
            m.params,
            vec![(
                "path".into(),
                Captured::Many(vec!["a".into(), "b c".into(), "d".into()])
            )]
        );
        let m = t.lookup("/shop").unwrap();
        assert_eq!(m.params, vec![("slug".into(), Captured::Many(vec![]))]);
    }

    #[test]
    fn percent_decoding_happens_once_per_segment() {
        let (t, _) = table(&["files/[name]"]);
        let m = t.lookup("/files/a%2Fb%2541").unwrap();
        assert_eq!(
            m.params,
            vec![("name".into(), Captured::One("a/b%41".into()))]
        );
    }

    #[test]
    fn empty_segments_match_nothing() {
        let (t, _) = table(&["", "a/b", "a/[x]"]);
        assert!(t.lookup("/").is_some());
        assert_eq!(t.lookup("/a//b"), None);
        assert_eq!(t.lookup("/a/b/"), None);
        assert_eq!(t.lookup("//"), None);
        assert_eq!(t.lookup("a/b"), None);
    }

    #[test]
    fn conflicts_are_reported() {
        let (_, errors) = table(&["a/[id]", "a/[slug]"]);
        assert!(matches!(
            errors[..],
            [ScanError::DynamicNameConflict { .. }]
        ));
        let (_, errors) = table(&["x", "x"]);
        assert!(matches!(errors[..], [ScanError::DuplicateRoute { .. }]));
        let (_, errors) = table(&["shop", "shop/[[...slug]]"]);
        assert!(matches!(errors[..], [ScanError::DuplicateRoute { .. }]));
        let (_, errors) = table(&["a/[id]", "a/[...rest]", "a/[[...all]]"]);
        assert!(errors.is_empty());
    }
}
