"""Evaluating the project's `config.py` inside the sandbox.

`config.py` holds plain assignments (DECISIONS.md, "Project files"). It is executed here, never on
the host; the names it assigns are checked against the known settings and their types, and
returned to the host as JSON. Every error names `config.py` and the line of the assignment.
"""

import ast
import json
import types

FILENAME = "/project/config.py"

# name -> expected type, or a dict of key -> expected type for a dict setting.
SCHEMA = {
    "app_name": str,
    "debug": bool,
    "docs_enabled": bool,
    "title": str,
    "description": str,
    "version": str,
    "server": {"host": str, "port": int, "workers": int},
    "logging": {"level": str, "production_level": str},
    "build": {"cache_dir": str, "compression_level": int},
    "commands": "commands",
    "sandbox": {"memory_mb": int, "timeout_s": (int, float), "max_body_bytes": int},
}


class ConfigError(Exception):
    """A setting that is unknown or of the wrong type; `lineno` is its assignment's line."""

    def __init__(self, message, lineno):
        super().__init__(message)
        self.filename = FILENAME
        self.lineno = lineno
        self.msg = message


def _type_name(expected):
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return expected.__name__


def _check(name, value, expected, lineno):
    if expected == "commands":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ConfigError(f"'{name}' must be a dict of command name to shell command string", lineno)
        return
    if isinstance(expected, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"'{name}' must be a dict, not {type(value).__name__}", lineno)
        for key, item in value.items():
            if key not in expected:
                known = ", ".join(sorted(expected))
                raise ConfigError(f"unknown key '{key}' in '{name}' (known keys: {known})", lineno)
            _check(f"{name}['{key}']", item, expected[key], lineno)
        return
    ok = isinstance(value, expected) and not (isinstance(value, bool) and expected is not bool)
    if not ok:
        raise ConfigError(
            f"'{name}' must be of type {_type_name(expected)}, not {type(value).__name__}", lineno
        )


def evaluate(source):
    """Run `config.py`'s source and return its settings as a JSON object text."""
    tree = ast.parse(source, FILENAME)
    lines = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                lines.setdefault(target.id, node.lineno)
    namespace = {"__name__": "config", "__file__": FILENAME}
    exec(compile(tree, FILENAME, "exec"), namespace)
    result = {}
    for name, value in namespace.items():
        if name.startswith("_") or isinstance(value, types.ModuleType) or callable(value):
            continue
        lineno = lines.get(name, 1)
        if name not in SCHEMA:
            known = ", ".join(sorted(SCHEMA))
            raise ConfigError(f"unknown setting '{name}' (known settings: {known})", lineno)
        _check(name, value, SCHEMA[name], lineno)
        result[name] = value
    levels = {"trace", "debug", "info", "warning", "warn", "error", "critical"}
    for key, level in result.get("logging", {}).items():
        if level.lower() not in levels:
            raise ConfigError(
                f"'logging['{key}']' must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not {level!r}",
                lines.get("logging", 1),
            )
    server = result.get("server", {})
    port = server.get("port")
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError("'server['port']' must be from 0 to 65535", lines.get("server", 1))
    build = result.get("build", {})
    level = build.get("compression_level")
    if level is not None and not 1 <= level <= 9:
        raise ConfigError("'build['compression_level']' must be from 1 to 9", lines.get("build", 1))
    return json.dumps(result)
