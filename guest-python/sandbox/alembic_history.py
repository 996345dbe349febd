"""Alembic in the sandbox: the project's `alembic/` history, run against the project's database.

The host copies the project's `alembic.ini` (if any), `pyproject.toml` (if any) and `alembic/`
folder into a folder of its own and preopens it here as `/project` (writable only for
`filerouter db alembic`, whose new files the host copies back into the project). The routes and
the project's packages are importable as in `dev`, so `env.py` imports the project's models as
route code does (`from _lib.models import Base`). Whatever `alembic.ini` says, `sqlalchemy.url`
is `filerouter://` (`filerouter.db.url()`): the project's database on whichever backend the host
keeps it, SQLite or Postgres, so one history serves both.

`run(args)` runs Alembic's own command line (`["upgrade", "heads"]`, `["revision",
"--autogenerate", "-m", "add summary"]`, `["history"]`...) and reports what it printed, then
where the database stands: the revisions it is at and the history's heads.

Not here: which files are copied, what is written back, or when a history is applied (the
host's `alembic` module).
"""

import contextlib
import io
import json
import logging
import os
import sys

import project
from filerouter import db as _db

PROJECT = "/project"
FOLDER = PROJECT + "/alembic"
INI = PROJECT + "/alembic.ini"
TOML = PROJECT + "/pyproject.toml"
PROG = "filerouter db alembic"


class _Output(io.StringIO):
    """What Alembic and `env.py` print, kept for the host (bounded: a runaway loop of prints
    must not grow the instance's memory without end; the instance's own limit holds anyway)."""

    LIMIT = 1 << 20

    def write(self, text):
        if self.tell() < self.LIMIT:
            super().write(text[: self.LIMIT - self.tell()])
        return len(text)


def run(args, report_current=True):
    """Run Alembic's command line with `args` (empty: only report where the database stands;
    `report_current` false: only the history's heads, without a database). Returns JSON text:
    {"output", "current", "heads", "status"}; `status` is 0, or the exit
    status of a command Alembic refused (a bad argument, an unknown revision), whose reason is
    in `output`. An exception from `env.py` or a revision propagates (it names their line)."""
    project._enable_route_imports()
    # Relative paths are the project's, as when `alembic` runs in the project folder: `init
    # alembic` then writes `script_location = %(here)s/alembic`.
    os.chdir(PROJECT)
    # The project's package, not the guest's: imported when a history is run.
    from alembic.config import CommandLine, Config  # noqa: PLC0415
    from alembic.script import ScriptDirectory  # noqa: PLC0415
    from alembic.util import CommandError  # noqa: PLC0415

    _hide_host_tables()
    output = _Output()
    status = 0
    current, heads = [], []
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), _logging(output):
        try:
            if args:
                line = CommandLine(prog=PROG)
                options = line.parser.parse_args(list(args))
                if not hasattr(options, "cmd"):
                    line.parser.error("too few arguments")
                options.raiseerr = True
                try:
                    line.run_cmd(_config(Config, options), options)
                except CommandError as exc:
                    print(f"FAILED: {exc}")
                    status = 1
            if os.path.isfile(os.path.join(FOLDER, "env.py")):
                report = _config(Config, None)
                heads = list(ScriptDirectory.from_config(report).get_heads())
                if report_current:
                    current = _current(report)
        except SystemExit as exc:  # argparse's refusal of the arguments, with its message
            status = exc.code if isinstance(exc.code, int) and exc.code else 2
    return json.dumps({"output": output.getvalue(), "current": current, "heads": heads, "status": status})


def _config(Config, options):
    """Alembic's `Config` for the copied project: its `alembic.ini` (or `pyproject.toml`), the
    script folder at `/project/alembic`, and the project's database."""
    init = options is not None and options.cmd[0].__name__ == "init"
    kwargs = {
        # `init` writes alembic.ini; every other command reads it if the project has one.
        "file_": INI if init or os.path.isfile(INI) else None,
        "ini_section": getattr(options, "name", None) or "alembic",
        "cmd_opts": options,
    }
    if os.path.isfile(TOML):
        kwargs["toml_file"] = TOML
    config = Config(**kwargs)
    if not init:
        config.set_main_option("script_location", FOLDER)
    config.set_main_option("sqlalchemy.url", _db.url())
    return config


# The host's own tables in a SQLite database (the SQL migrations' record,
# `_filerouter_migrations`): not the project's schema, so `--autogenerate` must not drop them.
# On Postgres they live in a schema of the host's, which Alembic does not compare.
HOST_TABLES = "_filerouter"


def _hide_host_tables():
    """Keep the host's tables out of what Alembic compares, whatever `env.py` configures: its
    own `include_name` (if any) still decides for every other name. This instance's Alembic
    alone is changed, and the instance ends with the call."""
    from alembic.runtime.environment import EnvironmentContext  # noqa: PLC0415

    configure = EnvironmentContext.configure

    def configure_without_host_tables(self, *args, **kwargs):
        theirs = kwargs.get("include_name")

        def include_name(name, type_, parent_names):
            if type_ == "table" and name and name.startswith(HOST_TABLES):
                return False
            return theirs(name, type_, parent_names) if theirs is not None else True

        kwargs["include_name"] = include_name
        return configure(self, *args, **kwargs)

    EnvironmentContext.configure = configure_without_host_tables


def _current(config):
    """The revisions the database is at, as `alembic current` finds them (through the
    project's `env.py`, so a `version_table` it configures is the one read)."""
    from alembic.runtime.environment import EnvironmentContext  # noqa: PLC0415
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    script = ScriptDirectory.from_config(config)
    found = []

    def record(rev, context):
        found.extend(r.revision for r in script.get_all_current(rev))
        return []

    with EnvironmentContext(config, script, fn=record, dont_mutate=True):
        script.run_env()
    return found


@contextlib.contextmanager
def _logging(output):
    """Alembic's progress lines (`Running upgrade a -> b`) into `output`, at INFO, as its own
    command line shows them; `env.py`'s `fileConfig(...)` may replace this with its own."""
    root = logging.getLogger()
    handler = logging.StreamHandler(output)
    handler.setFormatter(logging.Formatter("%(levelname)-5.5s [%(name)s] %(message)s"))
    alembic = logging.getLogger("alembic")
    saved = alembic.level
    alembic.setLevel(logging.INFO)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        alembic.setLevel(saved)
        sys.stdout.flush()
