//! Which sources of packages the project may name: checked before the installer runs, since
//! building a distribution from source runs its build code (`setup.py`, or a PEP 517 backend
//! and what the source configures it with) on this machine, with the user's rights.
//!
//! A distribution from the user's own package index (PyPI, or what pip's configuration and
//! `PIP_*` variables say) is built from source when it must be (no wheel, or a fallback to pure
//! Python): that runs its publisher's build code, as `pip install` does. A source the
//! *project* names is refused when installing it could build: a path (a folder, an sdist), a
//! URL to anything but a wheel (`name @ https://.../x.tar.gz`), a VCS URL (`git+...`), an
//! editable (`-e`), and an index or find-links option in a requirements file (an index the
//! project chooses serves whatever sources it likes under any name). A wheel given by path or
//! URL is installed (installing a wheel runs none of its code). Resolving alone would already
//! run the build code (pip prepares an sdist's metadata by running its backend), so the check
//! comes before anything runs. Nested requirements files (`-r`, `-c`) are read, at most
//! [`MAX_DEPTH`] deep, each inside the project and within
//! [`MAX_SOURCE_BYTES`](crate::regular_file::MAX_SOURCE_BYTES).
//!
//! Not for: which distributions have native code (`super`), or running the installer.

use std::path::{Path, PathBuf};

use super::{PackagesError, Requirements};

/// How deep `-r`/`-c` files may nest.
pub const MAX_DEPTH: usize = 8;

/// Archive suffixes pip builds from, as they end a path or URL.
const SOURCE_ARCHIVES: &[&str] = &[
    ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz", ".tar.xz", ".txz",
];

/// Options of a requirements file that name where packages come from.
const SOURCE_OPTIONS: &[&str] = &[
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
];

/// The project's requirements, refused (each refusal naming where it is and what it names) if
/// any would have the installer build a source the project chose.
pub fn check(root: &Path, requirements: &Requirements) -> Result<(), PackagesError> {
    let mut refused = Vec::new();
    match requirements {
        Requirements::List(list) => {
            for requirement in list {
                if let Some(why) = requirement_refusal(requirement) {
                    refused.push(format!("pyproject.toml: `{requirement}`: {why}"));
                }
            }
        }
        Requirements::File(file) => check_file(root, file, 0, &mut refused)?,
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(PackagesError::ProjectSource(refused))
    }
}

/// Check the requirements file `file` (`depth` files deep), adding refusals to `refused`.
fn check_file(
    root: &Path,
    file: &Path,
    depth: usize,
    refused: &mut Vec<String>,
) -> Result<(), PackagesError> {
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    if depth > MAX_DEPTH {
        return Err(PackagesError::Read(format!(
            "{shown}: requirements files nest more than {MAX_DEPTH} deep"
        )));
    }
    let text = crate::regular_file::read_inside(file, root, crate::regular_file::MAX_SOURCE_BYTES)
        .map_err(|e| PackagesError::Read(e.to_string()))
        .and_then(|bytes| {
            String::from_utf8(bytes)
                .map_err(|_| PackagesError::Read(format!("{shown}: not UTF-8 text")))
        })?;
    for (number, line) in logical_lines(&text) {
        let at = format!("{shown}:{number}");
        let (option, value) = split_option(&line);
        match option.as_deref() {
            Some("-r" | "--requirement" | "-c" | "--constraint") => {
                let Some(value) = value else { continue };
                if value.contains("://") {
                    refused.push(format!(
                        "{at}: `{line}`: a requirements file from a URL is not read; keep it in the project"
                    ));
                    continue;
                }
                let nested = file.parent().unwrap_or(root).join(&value);
                check_file(root, &nested, depth + 1, refused)?;
            }
            Some("-e" | "--editable") => refused.push(format!(
                "{at}: `{line}`: an editable install builds its source on this machine, running code it holds"
            )),
            Some(option) if SOURCE_OPTIONS.contains(&option) => refused.push(format!(
                "{at}: `{line}`: a package source the project names may serve any source under any name, and building one runs its code on this machine; set the index in pip's own configuration (pip.conf, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS), which is yours, not the project's"
            )),
            // Other options (`--hash`, `--pre`, `--no-binary`, ...) name no source.
            Some(_) => {}
            None => {
                if let Some(why) = requirement_refusal(&line) {
                    refused.push(format!("{at}: `{line}`: {why}"));
                }
            }
        }
    }
    Ok(())
}

/// The lines of a requirements file as pip joins them: `\` at the end continues a line, `#`
/// at the start or after whitespace starts a comment; blank lines are left out. With their
/// first line's number.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let (number, mut line) = current.take().unwrap_or((index + 1, String::new()));
        if let Some(body) = raw.strip_suffix('\\') {
            line.push_str(body);
            current = Some((number, line));
            continue;
        }
        line.push_str(raw);
        let line = strip_comment(&line).trim().to_string();
        if !line.is_empty() {
            out.push((number, line));
        }
    }
    if let Some((number, line)) = current {
        let line = strip_comment(&line).trim().to_string();
        if !line.is_empty() {
            out.push((number, line));
        }
    }
    out
}

fn strip_comment(line: &str) -> &str {
    if line.trim_start().starts_with('#') {
        return "";
    }
    match line.find(" #").or_else(|| line.find("\t#")) {
        Some(at) => &line[..at],
        None => line,
    }
}

/// A line's leading option and its value (`-r x`, `-rx`, `--requirement=x`), or `None` for a
/// requirement.
fn split_option(line: &str) -> (Option<String>, Option<String>) {
    if !line.starts_with('-') {
        return (None, None);
    }
    let (head, rest) = match line.split_once(|c: char| c.is_whitespace() || c == '=') {
        Some((head, rest)) => (head, Some(rest.trim().to_string())),
        None => (line, None),
    };
    // Short options may carry their value without a space: `-rfile.txt`, `-e.`.
    if !head.starts_with("--") && head.len() > 2 {
        return (
            Some(head[..2].to_string()),
            Some(line[2..].trim().to_string()),
        );
    }
    (Some(head.to_string()), rest.filter(|r| !r.is_empty()))
}

/// Why installing `requirement` (a requirement line, its options after it) could build a
/// source the project chose, if it could.
fn requirement_refusal(requirement: &str) -> Option<&'static str> {
    // Options after a requirement (`--hash=...`) and its marker are not its source.
    let head = requirement
        .split(" --")
        .next()
        .unwrap_or(requirement)
        .split(';')
        .next()
        .unwrap_or(requirement)
        .trim();
    let source = match named_url(head) {
        Some(url) => url,
        None if looks_like_a_location(head) => head,
        None => return None,
    };
    let lower = source.to_ascii_lowercase();
    let bare = lower
        .split(['#', '?'])
        .next()
        .unwrap_or(&lower)
        .trim_end_matches('/');
    let vcs = lower
        .split_once("://")
        .is_some_and(|(scheme, _)| scheme.contains('+'));
    if bare.ends_with(".whl") && !vcs {
        return None;
    }
    if vcs {
        return Some(
            "a VCS source is built on this machine, running its setup code; give a wheel, or a name from your package index",
        );
    }
    if SOURCE_ARCHIVES.iter().any(|suffix| bare.ends_with(suffix)) {
        return Some(
            "a source archive is built on this machine, running its setup.py or build backend; give a wheel of it, or a name from your package index",
        );
    }
    Some(
        "a source folder or URL is built on this machine, running its setup.py or build backend; give a wheel of it, or a name from your package index",
    )
}

/// The URL of `name @ url`, `name[extra] @ url`.
fn named_url(head: &str) -> Option<&str> {
    let (name, url) = head.split_once('@')?;
    let name = name.trim();
    let bare = name.split('[').next().unwrap_or(name).trim();
    let is_name = !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    // `git+https://user@host/...` without a name has its `@` in the URL.
    (is_name && !name.contains("://")).then(|| url.trim())
}

/// Whether pip reads `head` as a path or a URL rather than a name (pip: a path separator, a
/// leading `.`, a scheme, or an archive's name).
fn looks_like_a_location(head: &str) -> bool {
    let lower = head.to_ascii_lowercase();
    head.contains('/')
        || head.contains('\\')
        || head.starts_with('.')
        || head.starts_with('~')
        || lower.contains("://")
        || lower.ends_with(".whl")
        || SOURCE_ARCHIVES.iter().any(|s| lower.ends_with(s))
        || PathBuf::from(head).is_absolute()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_wheels_pass_sources_do_not() {
        for fine in [
            "Jinja2==3.1.6",
            "requests[socks]>=2 ; python_version >= '3.8'",
            "pkg @ https://example.com/pkg-1.0-py3-none-any.whl",
            "./wheels/fastthing-1.0-py3-none-any.whl",
            "pkg==1.0 --hash=sha256:abc",
            "pkg @ https://example.com/pkg-1.0+local-py3-none-any.whl",
        ] {
            assert_eq!(requirement_refusal(fine), None, "{fine}");
        }
        for refused in [
            "needsrust @ file:///tmp/dist/needsrust-1.0.tar.gz",
            "./mypkg",
            ".",
            "/abs/path/pkg",
            "dist/pkg-1.0.tar.gz",
            "pkg-1.0.zip",
            "git+https://github.com/a/b.git",
            "b @ git+https://github.com/a/b.git@v1",
            "pkg @ https://example.com/pkg-1.0.tar.gz",
            "pkg @ https://example.com/pkg.whl.tar.gz",
        ] {
            assert!(requirement_refusal(refused).is_some(), "{refused}");
        }
    }

    #[test]
    fn options_are_split_as_pip_reads_them() {
        assert_eq!(
            split_option("-r other.txt"),
            (Some("-r".into()), Some("other.txt".into()))
        );
        assert_eq!(
            split_option("-rother.txt"),
            (Some("-r".into()), Some("other.txt".into()))
        );
        assert_eq!(
            split_option("--index-url=https://x"),
            (Some("--index-url".into()), Some("https://x".into()))
        );
        assert_eq!(split_option("-e ."), (Some("-e".into()), Some(".".into())));
        assert_eq!(split_option("Jinja2"), (None, None));
        assert_eq!(
            logical_lines("a \\\n  b # c\n# d\n\ne"),
            vec![(1, "a   b".to_string()), (5, "e".to_string())]
        );
    }
}
