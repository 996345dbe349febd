//! Settings and secrets for route code, given by the operator outside the source.
//!
//! `config.py` declares what the project needs, and may hold settings of its own:
//!
//! ```python
//! environment = {
//!     "names": ["JWT_SECRET", "DATABASE_URL"],  # required: the server refuses to start without them
//!     "optional": ["SENTRY_DSN"],               # may be missing
//!     "file": ".env",                           # KEY=VALUE lines, in the project [default: .env, if there is one]
//! }
//! settings = {"page_size": 20}                  # the project's own settings (not secret)
//! ```
//!
//! Where the values come from ([`Sources`]): for one project (`dev`, `run`), the server's own
//! environment, else the project's env file; for a tenant of `run --tenants`, its section of
//! the tenants file (`env`), else the operator's `env_file`, else the project's env file, and
//! never the server's environment, which is the operator's. Only declared names are read: a
//! project cannot ask for a variable it did not name, and a tenant cannot reach the server's.
//!
//! Values are read when the server starts (and on `dev` reloads), never by `build`: the build
//! cache never holds one, sealed or not. They reach the guest during requests only (WIT
//! `environment`); builds and route inspections see the names without values, so `/docs` cannot
//! show one. [`Environment::redact`] replaces them in what the server logs or shows (the guest's
//! output, error pages), in every spelling `crate::redaction` knows, computed once per
//! environment.
//!
//! The env file is dotenv's format (`KEY=value`, `export KEY=value`, `#` comments, single
//! quotes literal, double quotes with `\n`, `\"` and `\\`) **without** `$VAR` substitution: a file
//! that a tenant wrote must not read the server's environment. That is why it is parsed here
//! rather than with the dotenvy crate, which substitutes from the process environment.
//!
//! Not for: evaluating `config.py` (`crate::config`), or how route code sees the values
//! (`guest-python/filerouter/environment.py`).

use std::{borrow::Cow, collections::BTreeMap, fmt, path::Path, sync::Arc};

use serde::{Deserialize, Serialize};

use crate::{
    redaction::Redactor,
    regular_file::{self, FileError},
};

/// The env file read when `config.py` names none (if the project has one).
pub const DEFAULT_FILE: &str = ".env";

/// Values shorter than this are not redacted: they would match ordinary text (`1`, `true`).
pub const MIN_REDACTED_CHARS: usize = 6;

/// `config.py`'s `environment`: the names route code may read, and where the values are.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EnvironmentSettings {
    /// Names that must have a value when the server starts.
    pub names: Vec<String>,
    /// Names that may be missing.
    pub optional: Vec<String>,
    /// The env file, relative to the project [default: [`DEFAULT_FILE`], if it exists].
    pub file: Option<String>,
}

impl EnvironmentSettings {
    /// Every declared name, required ones first.
    pub fn all_names(&self) -> impl Iterator<Item = &String> {
        self.names.iter().chain(&self.optional)
    }
}

/// Values the operator wrote down for one tenant (its `env` table in the tenants file). Its
/// `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OperatorValues(pub BTreeMap<String, String>);

impl fmt::Debug for OperatorValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// Where the values of one project come from, besides its own env file.
#[derive(Debug, Default)]
pub struct Sources<'a> {
    /// Whether the server's own environment is read (one project: `dev`, `run`).
    pub process: bool,
    /// The operator's values (a tenant's `env` table), before anything else.
    pub operator: Option<&'a BTreeMap<String, String>>,
    /// The operator's env file (a tenant's `env_file`), after `operator`.
    pub operator_file: Option<&'a Path>,
}

/// Why the values could not be read: an env file that is missing, unreadable or malformed.
#[derive(Debug, thiserror::Error)]
pub enum EnvironmentError {
    #[error("{0}")]
    File(FileError),
    #[error("{file}:{line}: {message}")]
    Syntax {
        file: String,
        line: usize,
        message: String,
    },
    /// The thread that read the files failed.
    #[error("reading the environment failed: {0}")]
    Failed(String),
}

/// One project's declarations and, where given, its values. Cheap to clone; its `Debug` shows
/// names, never values.
#[derive(Clone, Default)]
pub struct Environment {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    names: Vec<String>,
    settings_json: String,
    values: Vec<(String, String)>,
    /// The values' spellings, computed once here rather than per line redacted.
    redactor: Redactor,
}

impl Inner {
    fn new(names: Vec<String>, settings_json: String, values: Vec<(String, String)>) -> Inner {
        let redactor = Redactor::new(&values, MIN_REDACTED_CHARS);
        Inner {
            names,
            settings_json,
            values,
            redactor,
        }
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field("names", &self.inner.names)
            .field(
                "given",
                &self.inner.values.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What [`Environment::gather`] found: the environment, and the required names without a value.
#[derive(Debug)]
pub struct Gathered {
    pub environment: Environment,
    pub missing: Vec<String>,
}

impl Gathered {
    /// One line naming the missing required names and where to give them, if any are missing.
    pub fn missing_message(&self, tenant: bool) -> Option<String> {
        if self.missing.is_empty() {
            return None;
        }
        let names = self.missing.join(", ");
        let place = if tenant {
            "in the tenant's `env` table or `env_file` in the tenants file, or in the project's env file"
        } else {
            "in the server's environment or the project's env file (config.py `environment['file']`, default .env)"
        };
        Some(format!(
            "config.py's environment['names'] requires {names}, which has no value: give it {place}, or move it to environment['optional']"
        ))
    }
}

impl Environment {
    /// The declarations without values: what a build and a route inspection see.
    /// `project_settings` is `config.py`'s `settings`.
    pub fn declared(
        declared: &EnvironmentSettings,
        project_settings: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Environment {
        Environment {
            inner: Arc::new(Inner::new(
                declared.all_names().cloned().collect(),
                settings_json(project_settings),
                Vec::new(),
            )),
        }
    }

    /// The declarations of the project at `root` with their values from `sources` and the
    /// project's env file. Blocking (it reads files): call it off the async threads.
    pub fn gather(
        declared: &EnvironmentSettings,
        project_settings: Option<&serde_json::Map<String, serde_json::Value>>,
        root: &Path,
        sources: &Sources,
    ) -> Result<Gathered, EnvironmentError> {
        let project_file = match &declared.file {
            Some(file) => Some(read_file(&root.join(file), Some(root))?),
            None => match read_file(&root.join(DEFAULT_FILE), Some(root)) {
                Ok(values) => Some(values),
                Err(EnvironmentError::File(FileError::NotFound(_))) => None,
                Err(e) => return Err(e),
            },
        };
        let operator_file = match sources.operator_file {
            Some(path) => Some(read_file(path, None)?),
            None => None,
        };
        let mut values = Vec::new();
        let mut missing = Vec::new();
        for name in declared.all_names() {
            let value = sources
                .operator
                .and_then(|given| given.get(name).cloned())
                .or_else(|| operator_file.as_ref().and_then(|f| f.get(name).cloned()))
                .or_else(|| sources.process.then(|| std::env::var(name).ok()).flatten())
                .or_else(|| project_file.as_ref().and_then(|f| f.get(name).cloned()));
            match value {
                Some(value) => values.push((name.clone(), value)),
                None if declared.names.contains(name) => missing.push(name.clone()),
                None => {}
            }
        }
        for (file, given) in [
            (
                declared.file.as_deref().unwrap_or(DEFAULT_FILE),
                &project_file,
            ),
            ("the operator's env_file", &operator_file),
        ] {
            for key in given.iter().flat_map(|g| g.keys()) {
                if !declared.all_names().any(|n| n == key) {
                    tracing::info!(
                        "{file}: {key} is not declared in config.py's environment, so route code cannot read it"
                    );
                }
            }
        }
        Ok(Gathered {
            environment: Environment {
                inner: Arc::new(Inner::new(
                    declared.all_names().cloned().collect(),
                    settings_json(project_settings),
                    values,
                )),
            },
            missing,
        })
    }

    /// The declared names, required ones first.
    pub fn names(&self) -> &[String] {
        &self.inner.names
    }

    /// `config.py`'s `settings` as a JSON object text (`{}` when it has none).
    pub fn settings_json(&self) -> &str {
        &self.inner.settings_json
    }

    /// The values given, as `(name, value)`.
    pub fn values(&self) -> &[(String, String)] {
        &self.inner.values
    }

    /// The same declarations without the values (for the server's own calls into the guest).
    pub fn without_values(&self) -> Environment {
        if self.inner.values.is_empty() {
            return self.clone();
        }
        Environment {
            inner: Arc::new(Inner::new(
                self.inner.names.clone(),
                self.inner.settings_json.clone(),
                Vec::new(),
            )),
        }
    }

    /// `text` with every value of at least [`MIN_REDACTED_CHARS`] characters replaced by
    /// `[NAME]` in any spelling `crate::redaction` knows (raw, `repr`, JSON, percent-encoded,
    /// base64, HTML-escaped, ...); where spellings overlap the longest wins, so a value that
    /// contains another is replaced whole.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.inner.redactor.redact(text)
    }
}

fn settings_json(project_settings: Option<&serde_json::Map<String, serde_json::Value>>) -> String {
    match project_settings {
        Some(map) => serde_json::Value::Object(map.clone()).to_string(),
        None => "{}".to_string(),
    }
}

/// The most an env file may hold.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Read the env file at `path` (inside `root`, when given: a project's file may not lead out
/// of the project, nor be a hard link) and parse it.
fn read_file(
    path: &Path,
    root: Option<&Path>,
) -> Result<BTreeMap<String, String>, EnvironmentError> {
    let bytes = match root {
        // A project's own file: inside it, and with no other hard link (which could be
        // another tenant's `.env`). The operator's file is the operator's to link.
        Some(root) => regular_file::read_own_inside(path, root, MAX_FILE_BYTES),
        None => regular_file::read(path, MAX_FILE_BYTES),
    }
    .map_err(EnvironmentError::File)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| EnvironmentError::File(FileError::NotText(path.to_path_buf())))?;
    parse(&path.display().to_string(), &text)
}

/// Parse the text of an env file named `file`. A later line replaces an earlier one's value.
pub fn parse(file: &str, text: &str) -> Result<BTreeMap<String, String>, EnvironmentError> {
    let mut values = BTreeMap::new();
    let mut lines = text.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let at = |message: String| EnvironmentError::Syntax {
            file: file.to_string(),
            line: index + 1,
            message,
        };
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, rest)) = line.split_once('=') else {
            return Err(at(format!(
                "expected NAME=value, found {:?}",
                shorten(line)
            )));
        };
        let key = key.trim_end();
        if !valid_name(key) {
            return Err(at(format!(
                "{:?} is not a variable name (letters, digits and _, not starting with a digit)",
                shorten(key)
            )));
        }
        let rest = rest.trim_start();
        let value = match rest.chars().next() {
            Some(quote @ ('"' | '\'')) => {
                // A quoted value may span lines, up to its closing quote.
                let mut body = rest[1..].to_string();
                loop {
                    if let Some((value, after)) = closing_quote(&body, quote) {
                        let after = after.trim();
                        if !after.is_empty() && !after.starts_with('#') {
                            return Err(at(format!(
                                "unexpected {:?} after the closing quote of {key}",
                                shorten(after)
                            )));
                        }
                        break if quote == '"' {
                            unescape(&value)
                        } else {
                            value
                        };
                    }
                    match lines.next() {
                        Some((_, more)) => {
                            body.push('\n');
                            body.push_str(more);
                        }
                        None => {
                            return Err(at(format!("the value of {key} has no closing {quote}")));
                        }
                    }
                }
            }
            // Unquoted: up to a ` #` comment, trimmed.
            _ => match rest.find(" #").or_else(|| rest.find("\t#")) {
                Some(end) => rest[..end].trim_end().to_string(),
                None => rest.trim_end().to_string(),
            },
        };
        values.insert(key.to_string(), value);
    }
    Ok(values)
}

/// The text before the first unescaped `quote` in `body`, and what follows it.
fn closing_quote(body: &str, quote: char) -> Option<(String, &str)> {
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        if quote == '"' && c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        if c == quote && !escaped {
            return Some((body[..i].to_string(), &body[i + 1..]));
        }
        escaped = false;
    }
    None
}

/// A double-quoted value's escapes: `\n`, `\r`, `\t`, `\"`, `\\`; others are kept as written.
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Whether `name` is a variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn shorten(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> BTreeMap<String, String> {
        parse(".env", text).unwrap()
    }

    #[test]
    fn the_env_file_format() {
        let values = parsed(
            "# a comment\n\nA=plain value  # trailing comment\nexport B=1\nC='single $HOME \\n'\nD=\"double \\\"q\\\" \\n end\"\nE=\"two\nlines\"\nF=\nG=a#b\nA=again\n",
        );
        assert_eq!(values["A"], "again");
        assert_eq!(values["B"], "1");
        assert_eq!(values["C"], "single $HOME \\n");
        assert_eq!(values["D"], "double \"q\" \n end");
        assert_eq!(values["E"], "two\nlines");
        assert_eq!(values["F"], "");
        assert_eq!(values["G"], "a#b");
    }

    #[test]
    fn no_substitution_from_the_servers_environment() {
        // PATH is set wherever the tests run: were it substituted, the values would differ.
        assert!(std::env::var("PATH").is_ok());
        let values = parsed("A=$PATH\nB=\"${PATH}\"\n");
        assert_eq!(values["A"], "$PATH");
        assert_eq!(values["B"], "${PATH}");
    }

    #[test]
    fn malformed_lines_name_their_line() {
        for (text, line, words) in [
            ("A=1\nnot a pair\n", 2, "expected NAME=value"),
            ("A=1\n\n1X=2\n", 3, "not a variable name"),
            ("A=\"open\nstill open\n", 1, "no closing"),
            ("A='x' y\n", 1, "after the closing quote"),
        ] {
            match parse(".env", text) {
                Err(EnvironmentError::Syntax {
                    line: found,
                    message,
                    ..
                }) => {
                    assert_eq!(found, line, "{text:?}: {message}");
                    assert!(message.contains(words), "{text:?}: {message}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn gather_reads_declared_names_only_in_order_of_precedence() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "FROM_FILE=file\nBOTH=file\nUNDECLARED=x\n",
        )
        .unwrap();
        let operator_env = dir.path().join("operator.env");
        std::fs::write(&operator_env, "BOTH=operator-file\nOP=operator-file\n").unwrap();
        let declared = EnvironmentSettings {
            names: vec!["FROM_FILE".into(), "BOTH".into(), "OP".into()],
            optional: vec!["ABSENT".into()],
            file: None,
        };
        let given = BTreeMap::from([("OP".to_string(), "operator".to_string())]);
        let gathered = Environment::gather(
            &declared,
            None,
            dir.path(),
            &Sources {
                process: false,
                operator: Some(&given),
                operator_file: Some(&operator_env),
            },
        )
        .unwrap();
        assert!(gathered.missing.is_empty());
        let values: BTreeMap<_, _> = gathered.environment.values().iter().cloned().collect();
        assert_eq!(values["FROM_FILE"], "file");
        assert_eq!(values["BOTH"], "operator-file");
        assert_eq!(values["OP"], "operator");
        assert!(!values.contains_key("UNDECLARED"));
        assert!(!values.contains_key("ABSENT"));

        let required_missing = EnvironmentSettings {
            names: vec!["NOPE".into()],
            ..Default::default()
        };
        let gathered =
            Environment::gather(&required_missing, None, dir.path(), &Sources::default()).unwrap();
        assert_eq!(gathered.missing, vec!["NOPE".to_string()]);
        assert!(gathered.missing_message(false).unwrap().contains("NOPE"));
    }

    #[test]
    fn a_project_env_file_may_not_lead_outside_the_project() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("host.env"), "A=host\n").unwrap();
        let project = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path().join("host.env"), project.path().join(".env"))
            .unwrap();
        let declared = EnvironmentSettings {
            names: vec!["A".into()],
            ..Default::default()
        };
        let error =
            Environment::gather(&declared, None, project.path(), &Sources::default()).unwrap_err();
        assert!(error.to_string().contains("outside the project"), "{error}");
    }

    #[test]
    fn redact_replaces_long_values_whole_and_leaves_short_ones() {
        let declared = EnvironmentSettings {
            names: vec!["LONG".into(), "INNER".into(), "SHORT".into()],
            ..Default::default()
        };
        let environment = Environment {
            inner: Arc::new(Inner::new(
                declared.all_names().cloned().collect(),
                "{}".into(),
                vec![
                    ("LONG".into(), "sk_live_abcdef123".into()),
                    ("INNER".into(), "abcdef".into()),
                    ("SHORT".into(), "1".into()),
                ],
            )),
        };
        assert_eq!(
            environment.redact("key sk_live_abcdef123 and abcdef, 1"),
            "key [LONG] and [INNER], 1"
        );
        assert!(matches!(environment.redact("nothing"), Cow::Borrowed(_)));
        assert!(!format!("{environment:?}").contains("sk_live"));
    }
}
