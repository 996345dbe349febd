//! The documentation site (`docs/`, `mkdocs.yml`) against the code, so that it cannot drift:
//!
//! - the command-line reference lists exactly the flags each command's `--help` shows;
//! - the `config.py` reference lists exactly the names and keys `guest-python/sandbox/settings.py`
//!   accepts, and every `config.py` setting the limits page names is one of them;
//! - the `tenants.toml` reference lists exactly the keys `host/src/tenants/config.rs` accepts;
//! - the site builds with `mkdocs build --strict` (broken links and anchors fail it), with the
//!   mkdocs pinned in `tests/openapi/requirements.txt` (`tests/.venv`);
//! - the tutorial's route files, served by `filerouter dev`, answer what the tutorial shows, and
//!   so does the README's five-minute example.
//!
//! The mkdocs test needs python3 with its venv module and PyPI: without them it prints a loud
//! `SKIPPED` and passes, unless `FILEROUTER_REQUIRE_BROWSER=1` (CI sets it).

use crate::support;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use support::{
    Server, binary, run,
    tools::{missing, python_venv, workspace},
};

/// A file of the repository, as text.
fn read(rel: &str) -> String {
    let path = workspace().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What `left` has and `right` lacks, and the reverse, as one readable line each.
fn difference(
    left_name: &str,
    left: &BTreeSet<String>,
    right_name: &str,
    right: &BTreeSet<String>,
) -> String {
    let only_left: Vec<&String> = left.difference(right).collect();
    let only_right: Vec<&String> = right.difference(left).collect();
    format!("only in {left_name}: {only_left:?}\nonly in {right_name}: {only_right:?}")
}

/// The text between the first pair of backticks of `text`, if any.
fn first_code(text: &str) -> Option<&str> {
    let start = text.find('`')? + 1;
    let end = start + text[start..].find('`')?;
    Some(&text[start..end])
}

/// A Markdown page cut at its `## ` headings: (heading text, the lines under it), in order.
/// Lines inside fenced code blocks never count as headings.
fn sections(page: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = vec![(String::new(), Vec::new())];
    let mut fenced = false;
    for line in page.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && let Some(heading) = line.strip_prefix("## ") {
            out.push((heading.trim().to_string(), Vec::new()));
        } else {
            out.last_mut().unwrap().1.push(line.to_string());
        }
    }
    out
}

/// The first cell's code of every table row of `lines` whose first cell starts with code
/// (`` | `name` | ... ``): the names a reference table lists. Header and separator rows do not
/// start with a backtick.
fn table_names(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The command line

/// `filerouter ARGS --help`, run outside any project (inside one, the project's own commands
/// would be listed too).
fn help(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(binary())
        .args(args)
        .arg("--help")
        .current_dir(dir.path())
        .output()
        .expect("run filerouter --help");
    assert!(
        out.status.success(),
        "filerouter {args:?} --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The entries of a clap help section ("Commands:" or "Options:"): its lines up to the next
/// blank line. Wrapped descriptions are indented deeper than entries; callers skip them.
fn help_section<'a>(help: &'a str, title: &str) -> Vec<&'a str> {
    let mut lines = help.lines().skip_while(|l| l.trim_end() != title);
    if lines.next().is_none() {
        return Vec::new();
    }
    lines.take_while(|l| !l.trim().is_empty()).collect()
}

/// The subcommands a help lists (each entry indented by exactly two spaces), less `help`.
fn subcommands(help: &str) -> Vec<String> {
    help_section(help, "Commands:")
        .into_iter()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags a help lists, less `--help` and `--version`: in each option entry (a line
/// that starts with `-` once its indentation is removed), the words starting with `--` before
/// the description (which clap separates by at least two spaces).
fn long_flags(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in help_section(help, "Options:") {
        let entry = line.trim_start();
        if !entry.starts_with('-') {
            continue;
        }
        let spec = entry.split("  ").next().unwrap_or("");
        for word in spec.split([' ', ',']) {
            if word.starts_with("--") && word != "--help" && word != "--version" {
                flags.insert(word.to_string());
            }
        }
    }
    flags
}

/// Every command that does something (`dev`, `db migrate`, ...), as its words, found by
/// walking `filerouter --help` and the help of each command that has subcommands.
fn leaf_commands() -> Vec<Vec<String>> {
    let mut leaves = Vec::new();
    for command in subcommands(&help(&[])) {
        let nested = subcommands(&help(&[command.as_str()]));
        if nested.is_empty() {
            leaves.push(vec![command]);
        } else {
            for sub in nested {
                leaves.push(vec![command.clone(), sub]);
            }
        }
    }
    leaves
}

/// The flags `docs/reference/cli.md` lists per command: each section headed
/// ``## `filerouter WORDS` `` lists its flags as table rows whose first cell starts with
/// `` `--NAME ``. Sections with other headings (project commands, environment variables) are
/// not commands.
fn documented_flags() -> Vec<(String, BTreeSet<String>)> {
    let page = read("docs/reference/cli.md");
    let mut commands = Vec::new();
    for (heading, lines) in sections(&page) {
        let Some(command) = first_code(&heading).and_then(|c| c.strip_prefix("filerouter ")) else {
            continue;
        };
        let flags: BTreeSet<String> = lines
            .iter()
            .filter_map(|line| line.strip_prefix("| `--"))
            .map(|rest| {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                format!("--{name}")
            })
            .collect();
        commands.push((command.to_string(), flags));
    }
    commands
}

#[test]
fn the_command_line_reference_lists_every_flag_of_every_command() {
    let leaves = leaf_commands();
    assert!(
        leaves.len() >= 10,
        "filerouter --help lists too few commands to be parsed right: {leaves:?}"
    );
    let documented = documented_flags();
    let mut problems = Vec::new();
    for words in &leaves {
        let name = words.join(" ");
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        let in_help = long_flags(&help(&args));
        match documented.iter().find(|(command, _)| *command == name) {
            None => problems.push(format!(
                "`filerouter {name}` has no section ## `filerouter {name}` in docs/reference/cli.md (its flags: {in_help:?})"
            )),
            Some((_, in_page)) if *in_page != in_help => problems.push(format!(
                "`filerouter {name}`:\n{}",
                difference("--help", &in_help, "docs/reference/cli.md", in_page)
            )),
            Some(_) => {}
        }
    }
    for (command, _) in &documented {
        if !leaves.iter().any(|words| words.join(" ") == *command) {
            problems.push(format!(
                "docs/reference/cli.md documents `filerouter {command}`, which --help does not list"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

// ---------------------------------------------------------------------------------------------
// config.py

/// The keys of the Python dict literal that starts at `start` in `source` (e.g.
/// `SCHEMA = {`), read as text: a double-quoted string followed by `:` is a key; at depth 1
/// (directly in the dict) it is returned as `name`, at depth 2 (in a dict that is the value of
/// `name`) as `name.key`. Deeper keys are not returned. `settings.py` writes its schema this
/// way: string keys in double quotes, nested dicts for the dict settings, no braces inside
/// strings.
fn dict_keys(source: &str, start: &str) -> BTreeSet<String> {
    let at = source
        .find(start)
        .unwrap_or_else(|| panic!("guest-python/sandbox/settings.py no longer has `{start}`"));
    let text = &source[at + start.len() - 1..]; // from the opening brace
    let mut keys = BTreeSet::new();
    let mut depth = 0;
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                let begin = i + 1;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += 1;
                }
                let word: String = chars[begin..i].iter().collect();
                let mut next = i + 1;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                if next < chars.len() && chars[next] == ':' {
                    if depth == 1 {
                        current = word.clone();
                        keys.insert(word);
                    } else if depth == 2 {
                        keys.insert(format!("{current}.{word}"));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    keys
}

/// What `config.py` may say, from `guest-python/sandbox/settings.py`, which checks it: the names of
/// `SCHEMA` and the keys of its dict settings (`server.port`), the keys of
/// `ENVIRONMENT_KEYS` (`environment.names`) and of `PLUGIN_ENTRY` (`plugins.component`).
fn config_names_in_code() -> BTreeSet<String> {
    let source = read("guest-python/sandbox/settings.py");
    let mut names = dict_keys(&source, "SCHEMA = {");
    for key in dict_keys(&source, "ENVIRONMENT_KEYS = {") {
        names.insert(format!("environment.{key}"));
    }
    for key in dict_keys(&source, "PLUGIN_ENTRY = {") {
        names.insert(format!("plugins.{key}"));
    }
    names
}

/// What `docs/reference/config.md` lists: the names in the table under `## Names`, and, under
/// each heading that starts with a name in code (``## `server` ``, ``## `plugins` entries``),
/// the keys its table lists, as `name.key`.
fn config_names_in_page() -> BTreeSet<String> {
    let page = read("docs/reference/config.md");
    let mut names = BTreeSet::new();
    for (heading, lines) in sections(&page) {
        if heading == "Names" {
            names.extend(table_names(&lines));
        } else if let Some(setting) = first_code(&heading) {
            for key in table_names(&lines) {
                names.insert(format!("{setting}.{key}"));
            }
        }
    }
    names
}

#[test]
fn the_config_reference_lists_the_names_settings_py_accepts() {
    let code = config_names_in_code();
    assert!(
        code.contains("server.port") && code.contains("sandbox.cpu_ms") && code.len() > 40,
        "guest-python/sandbox/settings.py was not parsed as expected: {code:?}"
    );
    let page = config_names_in_page();
    assert_eq!(
        code,
        page,
        "docs/reference/config.md does not list what config.py accepts:\n{}",
        difference(
            "guest-python/sandbox/settings.py",
            &code,
            "docs/reference/config.md",
            &page
        )
    );
}

/// Every `NAME["KEY"]` written in `text` (the limits page names settings so), as `NAME.KEY`.
fn subscripted_settings(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("[\"") {
        let before = &rest[..at];
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let after = &rest[at + 2..];
        if let Some(end) = after.find("\"]")
            && !name.is_empty()
        {
            found.insert(format!("{name}.{}", &after[..end]));
        }
        rest = &rest[at + 2..];
    }
    found
}

#[test]
fn every_setting_the_limits_page_names_exists() {
    let code = config_names_in_code();
    let named = subscripted_settings(&read("docs/reference/limits.md"));
    assert!(
        named.len() >= 20,
        "docs/reference/limits.md names too few settings to be parsed right: {named:?}"
    );
    let unknown: Vec<&String> = named.difference(&code).collect();
    assert!(
        unknown.is_empty(),
        "docs/reference/limits.md names settings config.py does not accept: {unknown:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// tenants.toml

/// The field names of `struct NAME { ... }` in `source`: each line up to the closing `}` at
/// the start of a line that, with `pub ` removed, reads `field: Type` (attributes and comments
/// skipped). serde reads the file's keys by these names (no renames in that file).
fn struct_fields(source: &str, name: &str) -> BTreeSet<String> {
    let start = source
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("host/src/tenants/config.rs no longer has `struct {name}`"));
    let mut fields = BTreeSet::new();
    for line in source[start..].lines().skip(1) {
        if line.starts_with('}') {
            break;
        }
        let line = line.trim();
        if line.starts_with('#') || line.starts_with("//") {
            continue;
        }
        let line = line.strip_prefix("pub ").unwrap_or(line);
        if let Some((field, _)) = line.split_once(':')
            && !field.is_empty()
            && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            fields.insert(field.to_string());
        }
    }
    fields
}

#[test]
fn the_tenants_reference_lists_the_keys_the_tenants_file_accepts() {
    let source = read("host/src/tenants/config.rs");
    let mut code = BTreeSet::new();
    // The top level's fields, less its sections ([server], [defaults], [tenant.NAME]), which
    // the page gives as headings.
    for field in struct_fields(&source, "RawFile") {
        if !["server", "defaults", "tenant"].contains(&field.as_str()) {
            code.insert(field);
        }
    }
    for name in ["RawServer", "RawLimits", "RawTenant"] {
        code.extend(struct_fields(&source, name));
    }
    assert!(
        code.contains("max_loaded") && code.contains("cpu_ms") && code.contains("hosts"),
        "host/src/tenants/config.rs was not parsed as expected: {code:?}"
    );
    let page: BTreeSet<String> = sections(&read("docs/reference/tenants-toml.md"))
        .into_iter()
        .flat_map(|(_, lines)| table_names(&lines))
        .collect();
    assert_eq!(
        code,
        page,
        "docs/reference/tenants-toml.md does not list what the tenants file accepts:\n{}",
        difference(
            "host/src/tenants/config.rs",
            &code,
            "docs/reference/tenants-toml.md",
            &page
        )
    );
}

// ---------------------------------------------------------------------------------------------
// The site builds

#[test]
fn the_site_builds_strictly() {
    const TEST: &str = "docs_site::the_site_builds_strictly";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let site = tempfile::tempdir().unwrap();
    let out = Command::new(venv.join("bin/mkdocs"))
        .args(["build", "--strict", "--site-dir"])
        .arg(site.path())
        .current_dir(workspace())
        .env("NO_MKDOCS_2_WARNING", "1")
        .output()
        .expect("run mkdocs from tests/.venv");
    assert!(
        out.status.success(),
        "mkdocs build --strict failed (a broken link or anchor, or a page missing from the nav):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(site.path().join("tutorial/index.html").is_file());
}

// ---------------------------------------------------------------------------------------------
// Pages whose examples claim to run

/// A page's fenced code blocks: (language, lines).
fn code_blocks(page: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Vec<String>)> = None;
    for line in page.lines() {
        let fence = line.trim_start();
        match open.take() {
            None if fence.starts_with("```") => {
                open = Some((fence.trim_start_matches('`').trim().to_string(), Vec::new()));
            }
            None => {}
            Some(block) if fence.starts_with("```") => blocks.push(block),
            Some(mut block) => {
                block.1.push(line.to_string());
                open = Some(block);
            }
        }
    }
    blocks
}

/// The project files a page shows: its `python` blocks whose first line is `# PATH`, PATH one
/// word (`# routes/users/[id]/route.py`).
fn shown_files(page: &str) -> Vec<(String, String)> {
    code_blocks(page)
        .into_iter()
        .filter(|(lang, _)| lang == "python")
        .filter_map(|(_, lines)| {
            let path = lines.first()?.strip_prefix("# ")?.trim().to_string();
            let is_path = !path.is_empty() && !path.contains(' ') && path.ends_with(".py");
            is_path.then(|| (path, lines.join("\n") + "\n"))
        })
        .collect()
}

/// One request a page shows: `$ curl ...` in a `console` block, and the lines under it.
struct ShownRequest {
    command: String,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    answer: String,
}

/// The words of a shell command: split at spaces, with '...' and "..." kept whole (no escapes:
/// the pages' commands need none).
fn shell_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in command.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(quote.is_none(), "an unclosed quote in `{command}`");
    if in_word {
        words.push(word);
    }
    words
}

/// The requests a page shows, in order. Only `curl` is understood, with `-s`, `-X METHOD`,
/// `-H 'Name: value'`, `-d 'BODY'` (a POST unless `-X` says otherwise) and one URL on
/// `http://127.0.0.1:8000`; any other command or option fails the test, so that the page stays
/// within what is checked.
fn shown_requests(page: &str) -> Vec<ShownRequest> {
    let mut requests: Vec<ShownRequest> = Vec::new();
    for (lang, lines) in code_blocks(page) {
        if lang != "console" {
            continue;
        }
        for line in lines {
            let Some(command) = line.strip_prefix("$ ") else {
                let last = requests
                    .last_mut()
                    .unwrap_or_else(|| panic!("output before any command: {line}"));
                if !last.answer.is_empty() {
                    last.answer.push('\n');
                }
                last.answer.push_str(&line);
                continue;
            };
            let words = shell_words(command);
            assert_eq!(
                words.first().map(String::as_str),
                Some("curl"),
                "only curl is checked: `{command}`"
            );
            let mut request = ShownRequest {
                command: command.to_string(),
                method: String::new(),
                path: String::new(),
                headers: Vec::new(),
                body: None,
                answer: String::new(),
            };
            let mut words = words.into_iter().skip(1);
            while let Some(word) = words.next() {
                let mut value = || {
                    words
                        .next()
                        .unwrap_or_else(|| panic!("`{word}` without a value in `{command}`"))
                };
                match word.as_str() {
                    "-s" => {}
                    "-X" => request.method = value(),
                    "-H" => {
                        let header = value();
                        let (name, v) = header
                            .split_once(':')
                            .unwrap_or_else(|| panic!("a header without `:` in `{command}`"));
                        request
                            .headers
                            .push((name.trim().to_string(), v.trim().to_string()));
                    }
                    "-d" => request.body = Some(value()),
                    url if url.starts_with("http://") => {
                        request.path = url
                            .strip_prefix("http://127.0.0.1:8000")
                            .unwrap_or_else(|| {
                                panic!("a URL not on http://127.0.0.1:8000 in `{command}`")
                            })
                            .to_string();
                        assert!(
                            request.path.starts_with('/'),
                            "a URL without a path in `{command}`"
                        );
                    }
                    other => {
                        panic!("`{other}` is not understood by tests/docs_site.rs, in `{command}`")
                    }
                }
            }
            if request.method.is_empty() {
                request.method = if request.body.is_some() {
                    "POST"
                } else {
                    "GET"
                }
                .to_string();
            }
            assert!(!request.path.is_empty(), "no URL in `{command}`");
            requests.push(request);
        }
    }
    requests
}

/// Make a project with `filerouter init`, write into it the files `page` shows, serve it with
/// `filerouter dev`, and send the requests `page` shows, each expecting the answer shown
/// (compared as JSON when both are JSON, else as text).
fn check_page_runs(page_path: &str, at_least_files: usize, at_least_requests: usize) {
    let page = read(page_path);
    let files = shown_files(&page);
    let requests = shown_requests(&page);
    assert!(
        files.len() >= at_least_files && requests.len() >= at_least_requests,
        "{page_path}: {} files and {} requests found; the page or its parsing changed",
        files.len(),
        requests.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(&["init", "example"], dir.path());
    assert_eq!(code, 0, "filerouter init: {stdout}{stderr}");
    let project: PathBuf = dir.path().join("example");
    for (path, content) in &files {
        let file = project.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, content).unwrap();
    }
    let server = Server::start(
        &["dev", "--project", project_str(&project)],
        &[("RUST_LOG", "info")],
        Duration::from_secs(300),
    );
    for shown in &requests {
        let mut request = server.request(&shown.method, &shown.path);
        for (name, value) in &shown.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(body) = &shown.body {
            request = request.body(body.clone());
        }
        let response = request
            .send()
            .unwrap_or_else(|e| panic!("{page_path}: `{}`: {e}", shown.command));
        let text = response.text().unwrap_or_default();
        let matches = match (
            serde_json::from_str::<serde_json::Value>(&shown.answer),
            serde_json::from_str::<serde_json::Value>(&text),
        ) {
            (Ok(expected), Ok(got)) => expected == got,
            _ => shown.answer.trim() == text.trim(),
        };
        assert!(
            matches,
            "{page_path}: `{}` answered\n{text}\nwhere the page shows\n{}\n\nserver log:\n{}",
            shown.command,
            shown.answer,
            server.log()
        );
    }
}

fn project_str(project: &Path) -> &str {
    project.to_str().expect("a UTF-8 temporary path")
}

#[test]
fn the_tutorial_runs_as_shown() {
    check_page_runs("docs/tutorial.md", 3, 6);
}

#[test]
fn the_readme_example_runs_as_shown() {
    check_page_runs("README.md", 2, 3);
}
