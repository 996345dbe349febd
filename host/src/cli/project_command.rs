//! `filerouter NAME [ARGS...]`: run a project command, an entry of `commands` in config.py.
//!
//! config.py is evaluated in the sandbox like everywhere else; the command itself is the
//! project owner's own shell command and runs on the host, outside the sandbox, like an npm
//! script: `{host}` and `{port}` are replaced by the project's server address, and ARGS are
//! appended, shell-quoted. Also lists the commands for `filerouter --help`.

use std::{collections::BTreeMap, path::Path, process::ExitCode};

use anyhow::{Context, bail};

use crate::{
    config::Settings,
    project::Project,
    sandbox::{Limits, Sandbox, engine::SandboxEngine},
};

/// Run the project command `args[0]` of the project in the current folder.
pub fn run(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let Some((name, rest)) = args.split_first() else {
        bail!("no command given");
    };
    let root = std::env::current_dir().context("no current folder")?;
    let settings = load_settings(&root)?.with_context(|| {
        format!(
            "unknown command `{name}`: not a built-in command, and {} is not a filerouter project (no routes/ and config.py); see `filerouter --help`",
            root.display()
        )
    })?;
    let Some(template) = settings.commands.get(name) else {
        bail!(
            "unknown command `{name}`; {}",
            describe(&settings.commands).unwrap_or_else(|| {
                "config.py defines no project commands (`commands = {\"name\": \"shell command\"}`)"
                    .into()
            })
        );
    };
    let (host, port) = settings.server.address(None, None);
    let mut command = template
        .replace("{host}", &host)
        .replace("{port}", &port.to_string());
    for arg in rest {
        let quoted = shlex::try_quote(arg)
            .map_err(|_| anyhow::anyhow!("argument {arg:?} contains a NUL byte"))?;
        command.push(' ');
        command.push_str(&quoted);
    }
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(&root)
        .status()
        .with_context(|| format!("cannot run `{command}`"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

/// The "Project commands" section of `--help`, when the current folder is a project that
/// defines some. Errors are left to the command that runs.
pub fn help_section() -> Option<String> {
    let root = std::env::current_dir().ok()?;
    let settings = load_settings(&root).ok()??;
    describe(&settings.commands)
}

fn describe(commands: &BTreeMap<String, String>) -> Option<String> {
    if commands.is_empty() {
        return None;
    }
    let width = commands.keys().map(String::len).max().unwrap_or(0);
    let mut text = String::from("Project commands (from config.py):\n");
    for (name, command) in commands {
        text.push_str(&format!("  {name:<width$}  {command}\n"));
    }
    Some(text)
}

/// The project's settings, or `None` if `root` is not a project.
pub(super) fn load_settings(root: &Path) -> anyhow::Result<Option<Settings>> {
    if !root.join("config.py").is_file() || !Project::routes_dir(root).is_dir() {
        return Ok(None);
    }
    super::runtime()?.block_on(async {
        let engine = tokio::task::spawn_blocking(|| SandboxEngine::load(1))
            .await
            .context("engine setup panicked")??;
        let scheduler = crate::scheduler::Scheduler::new(1);
        let sandbox = Sandbox::new(engine, None, Limits::default(), scheduler.tooling())?;
        Ok(Some(sandbox.load_settings(root).await?))
    })
}
