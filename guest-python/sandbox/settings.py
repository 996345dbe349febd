"""Evaluating the project's `config.py` inside the sandbox.

`config.py` holds plain assignments (DECISIONS.md, "Project files"). It is executed here, never on
the host; the names it assigns are checked against the known settings and their types, and
returned to the host as JSON. Every error names `config.py` and the line of the assignment.
"""

import ast
import json
import keyword
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
    "server": {
        "host": str,
        "port": int,
        "workers": int,
        "max_connections": int,
        "header_timeout_s": (int, float),
        "body_timeout_s": (int, float),
        "max_buffered_body_bytes": int,
        "max_buffered_response_bytes": int,
        "write_timeout_s": (int, float),
        "queue": int,
    },
    "logging": {"level": str, "production_level": str},
    "build": {"cache_dir": str, "compression_level": int},
    "commands": "commands",
    "sandbox": {
        "memory_mb": int,
        "timeout_s": (int, float),
        "cpu_ms": int,
        "wall_s": (int, float),
        "max_body_bytes": int,
        "stream_cpu_ms": int,
        "stream_duration_s": (int, float),
        "stream_idle_s": (int, float),
        "max_streams": int,
        "websocket_message_cpu_ms": int,
        "websocket_max_message_bytes": int,
    },
    "plugins": "plugins",
    "database": {
        "max_size_mb": int,
        "max_rows": int,
        "max_result_mb": int,
        "max_temp_mb": int,
        "max_memory_mb": int,
    },
    "environment": "environment",
    "settings": "project",
    "openapi_tags": "openapi_tags",
    "record": {
        "enabled": bool,
        "sample": (int, float),
        "max_traces": int,
        "max_mb": int,
        "redact_headers": list,
    },
    "outbound": {
        "allow": "origins",
        "max_calls": int,
        "max_concurrent": int,
        "max_received_mb": int,
        "max_connections": int,
        "timeout_s": (int, float),
    },
}

# `environment`: the names route code reads from the operator's environment (host/src/environment.rs).
ENVIRONMENT_KEYS = {"names": list, "optional": list, "file": str}

# One entry of `plugins`: key -> expected type; `component` is required.
PLUGIN_ENTRY = {"component": str, "wit": str, "files": str, "kv": bool, "clocks": bool}


# (setting, key) -> (lowest, highest, whether the lowest itself is allowed). The host reads
# these into unsigned or positive types: a value out of range is refused here, with its line.
RANGES = {
    ("server", "port"): (0, 65535, True),
    ("server", "workers"): (1, 4096, True),
    ("server", "max_connections"): (1, 1_000_000, True),
    ("server", "header_timeout_s"): (0, 3600, False),
    ("server", "body_timeout_s"): (0, 86400, False),
    ("server", "max_buffered_body_bytes"): (1024, 2**63 - 1, True),
    ("server", "max_buffered_response_bytes"): (1024, 2**63 - 1, True),
    ("server", "write_timeout_s"): (0, 86400, False),
    ("server", "queue"): (0, 1_000_000, True),
    ("build", "compression_level"): (1, 9, True),
    ("sandbox", "memory_mb"): (1, 1 << 20, True),
    ("sandbox", "timeout_s"): (0, 86400, False),
    ("sandbox", "cpu_ms"): (1, 86_400_000, True),
    ("sandbox", "wall_s"): (0, 86400, False),
    ("sandbox", "max_body_bytes"): (0, 2**63 - 1, True),
    ("sandbox", "stream_cpu_ms"): (1, 86_400_000, True),
    ("sandbox", "stream_duration_s"): (0, 86400, False),
    ("sandbox", "stream_idle_s"): (0, 86400, False),
    ("sandbox", "max_streams"): (1, 1_000_000, True),
    ("sandbox", "websocket_message_cpu_ms"): (1, 86_400_000, True),
    ("sandbox", "websocket_max_message_bytes"): (125, 64 * 1024 * 1024, True),
    ("database", "max_size_mb"): (1, 1 << 30, True),
    ("database", "max_rows"): (1, 2**63 - 1, True),
    ("database", "max_result_mb"): (1, 1 << 20, True),
    ("database", "max_temp_mb"): (1, 1 << 30, True),
    ("database", "max_memory_mb"): (1, 1 << 20, True),
    ("outbound", "max_calls"): (1, 100_000, True),
    ("outbound", "max_concurrent"): (1, 1000, True),
    ("outbound", "max_received_mb"): (1, 1 << 20, True),
    ("outbound", "max_connections"): (1, 100_000, True),
    ("outbound", "timeout_s"): (0, 86400, False),
    ("record", "sample"): (0, 1, True),
    ("record", "max_traces"): (1, 1_000_000, True),
    ("record", "max_mb"): (1, 1 << 20, True),
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
    if expected == "plugins":
        _check_plugins(name, value, lineno)
        return
    if expected == "environment":
        _check_environment(name, value, lineno)
        return
    if expected == "project":
        _check_project(name, value, lineno)
        return
    if expected == "openapi_tags":
        _check_openapi_tags(name, value, lineno)
        return
    if expected == "origins":
        _check_origins(name, value, lineno)
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


def _check_origins(name, value, lineno):
    """`outbound['allow']`: a list of origins, `scheme://host[:port]` (host `*`, `*.name`, a
    name or an address); the host parses them again and names a bad one."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"'{name}' must be a list of origin strings such as \"https://api.example.com\"", lineno)
    for origin in value:
        scheme, sep, rest = origin.partition("://")
        rest = rest[:-1] if rest.endswith("/") else rest
        if not sep or scheme.lower() not in ("http", "https"):
            raise ConfigError(
                f"'{name}' entry {origin!r} must start with http:// or https://, e.g. \"https://api.example.com\"",
                lineno,
            )
        if not rest or any(c in rest for c in "/?#@ "):
            raise ConfigError(
                f"'{name}' entry {origin!r} is not an origin (scheme://host[:port], no path, query or credentials)",
                lineno,
            )


def _check_plugins(name, value, lineno):
    if not isinstance(value, dict):
        raise ConfigError(f"'{name}' must be a dict of plugin name to its entry, not {type(value).__name__}", lineno)
    for plugin, entry in value.items():
        if not isinstance(plugin, str) or not plugin.isidentifier() or keyword.iskeyword(plugin) or plugin.startswith("_"):
            raise ConfigError(
                f"plugin name {plugin!r} in '{name}' must be a Python identifier (route code imports it: "
                "`from filerouter.plugins import NAME`)",
                lineno,
            )
        if plugin in ("Err", "Ok", "PluginError", "PluginTrap", "Variant"):
            raise ConfigError(f"plugin name {plugin!r} is taken by filerouter.plugins itself; choose another", lineno)
        if not isinstance(entry, dict):
            raise ConfigError(
                f"'{name}['{plugin}']' must be a dict like {{\"component\": \"plugins/{plugin}/{plugin}.wasm\"}}",
                lineno,
            )
        if "component" not in entry:
            raise ConfigError(
                f"'{name}['{plugin}']' needs 'component': the path of its .wasm file, relative to the project",
                lineno,
            )
        for key, item in entry.items():
            if key not in PLUGIN_ENTRY:
                known = ", ".join(PLUGIN_ENTRY)
                raise ConfigError(f"unknown key '{key}' in '{name}['{plugin}']' (known keys: {known})", lineno)
            _check(f"{name}['{plugin}']['{key}']", item, PLUGIN_ENTRY[key], lineno)


def _check_environment(name, value, lineno):
    example = '{"names": ["JWT_SECRET"], "optional": ["SENTRY_DSN"], "file": ".env"}'
    if not isinstance(value, dict):
        raise ConfigError(f"'{name}' must be a dict like {example}", lineno)
    seen = set()
    for key, item in value.items():
        if key not in ENVIRONMENT_KEYS:
            known = ", ".join(ENVIRONMENT_KEYS)
            raise ConfigError(f"unknown key '{key}' in '{name}' (known keys: {known})", lineno)
        _check(f"{name}['{key}']", item, ENVIRONMENT_KEYS[key], lineno)
        if key == "file":
            continue
        for variable in item:
            if not isinstance(variable, str) or not _is_variable_name(variable):
                raise ConfigError(
                    f"{variable!r} in '{name}['{key}']' is not a variable name "
                    "(letters, digits and _, not starting with a digit)",
                    lineno,
                )
            if variable in seen:
                raise ConfigError(f"{variable!r} is named twice in '{name}'", lineno)
            seen.add(variable)


def _check_openapi_tags(name, value, lineno):
    example = '[{"name": "items", "description": "Manage items."}]'
    if not isinstance(value, list):
        raise ConfigError(f"'{name}' must be a list of tags like {example}", lineno)
    seen = set()
    for tag in value:
        if not isinstance(tag, dict) or not isinstance(tag.get("name"), str) or not tag["name"]:
            raise ConfigError(f"every entry of '{name}' must be a dict with a 'name', like {example}", lineno)
        for key, item in tag.items():
            if key not in ("name", "description", "externalDocs"):
                raise ConfigError(
                    f"unknown key '{key}' in '{name}' (known keys: name, description, externalDocs)", lineno
                )
            if key == "description" and not isinstance(item, str):
                raise ConfigError(f"the 'description' of tag {tag['name']!r} must be a str", lineno)
            if key == "externalDocs" and not (
                isinstance(item, dict)
                and isinstance(item.get("url"), str)
                and all(k in ("url", "description") and isinstance(v, str) for k, v in item.items())
            ):
                raise ConfigError(
                    f"the 'externalDocs' of tag {tag['name']!r} must be like "
                    '{"url": "https://...", "description": "..."}',
                    lineno,
                )
        if tag["name"] in seen:
            raise ConfigError(f"tag {tag['name']!r} is named twice in '{name}'", lineno)
        seen.add(tag["name"])


def _is_variable_name(text):
    return bool(text) and (text[0].isascii() and (text[0].isalpha() or text[0] == "_")) and all(
        c.isascii() and (c.isalnum() or c == "_") for c in text
    )


def _check_project(name, value, lineno):
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(
            f"'{name}' must be a dict of your own settings with string keys, like {{\"page_size\": 20}}", lineno
        )
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"'{name}' may hold str, int, float, bool, None, lists and dicts only: {exc}", lineno
        ) from None


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
            raise ConfigError(
                f"unknown setting '{name}' (known settings: {known}). The project's own settings go in "
                f"`settings = {{{name!r}: ...}}` (filerouter.settings); secrets stay out of the source: "
                f"declare them in `environment = {{\"names\": [...]}}` (os.environ, filerouter.env)",
                lineno,
            )
        _check(name, value, SCHEMA[name], lineno)
        result[name] = value
    levels = {"trace", "debug", "info", "warning", "warn", "error", "critical"}
    for key, level in result.get("logging", {}).items():
        if level.lower() not in levels:
            raise ConfigError(
                f"'logging['{key}']' must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not {level!r}",
                lines.get("logging", 1),
            )
    for (name, key), (low, high, low_allowed) in RANGES.items():
        value = result.get(name, {}).get(key)
        if value is None:
            continue
        above = value >= low if low_allowed else value > low
        if not (above and value <= high):  # also refuses NaN
            bound = "from" if low_allowed else "more than"
            raise ConfigError(
                f"'{name}['{key}']' must be {bound} {low} and at most {high}, not {value!r}",
                lines.get(name, 1),
            )
    return json.dumps(result)
