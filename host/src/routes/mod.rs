//! The project's routes: how a `routes/` folder tree becomes URL patterns ([`scan`]) and how a
//! request path finds its route ([`table`]).
//!
//! Everything here looks at file and folder names only; which HTTP methods a route file serves,
//! and whether its path ends with `/`, is learned by asking the guest (see `project`). No
//! project code runs here.

pub mod scan;
pub mod table;

use std::fmt;

/// One part of a URL pattern, from one folder name.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Segment {
    /// A plain folder: matches exactly its name.
    Static(String),
    /// `[name]`: one segment, captured as `name`.
    Param(String),
    /// `[...name]`: one or more remaining segments.
    CatchAll(String),
    /// `[[...name]]`: zero or more remaining segments.
    OptionalCatchAll(String),
}

impl Segment {
    /// The captured parameter's name, for a dynamic segment.
    pub fn param_name(&self) -> Option<&str> {
        match self {
            Segment::Static(_) => None,
            Segment::Param(n) | Segment::CatchAll(n) | Segment::OptionalCatchAll(n) => Some(n),
        }
    }

    /// Whether the segment captures the rest of the path.
    pub fn is_catch_all(&self) -> bool {
        matches!(self, Segment::CatchAll(_) | Segment::OptionalCatchAll(_))
    }
}

/// A URL pattern: the segments of a route, written OpenAPI-style (`/users/{id}`).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Pattern(pub Vec<Segment>);

impl Pattern {
    /// The pattern as a path, ending with `/` when `trailing_slash` (a route declared with
    /// `TRAILING_SLASH = True`: `/products/`, `/users/{id}/`); `/` stays `/`.
    pub fn path(&self, trailing_slash: bool) -> String {
        let path = self.to_string();
        if trailing_slash && !self.0.is_empty() {
            path + "/"
        } else {
            path
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("/");
        }
        for segment in &self.0 {
            match segment {
                Segment::Static(s) => write!(f, "/{s}")?,
                Segment::Param(n) | Segment::CatchAll(n) | Segment::OptionalCatchAll(n) => {
                    write!(f, "/{{{n}}}")?
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_slash_route_path_ends_with_a_slash_but_the_root_stays_one() {
        let users = Pattern(vec![
            Segment::Static("users".into()),
            Segment::Param("id".into()),
        ]);
        assert_eq!(users.path(false), "/users/{id}");
        assert_eq!(users.path(true), "/users/{id}/");
        assert_eq!(Pattern(Vec::new()).path(true), "/");
    }
}
