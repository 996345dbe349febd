"""Loading the project's Python files inside the sandbox, and reporting their failures.

Route files are read from the read-only `/routes` preopen and executed as fresh modules (every
call runs in a fresh instance, so nothing is cached between requests). Exceptions are turned into
`ProjectError` records that name the project file and line and keep only project frames.
"""

import os
import sys
import traceback
import types

from wit_world.imports.types import Frame, ProjectError

ROUTES_DIR = "/routes"
_route_counter = 0


def project_path(filename):
    """The path of a sandbox file relative to the project root, or None if it is not project code."""
    if filename.startswith(ROUTES_DIR + "/"):
        return filename[1:]
    if filename.startswith("/project/"):
        return filename[len("/project/"):]
    return None


def _enable_route_imports():
    # Let route files import helpers from private folders (`from _lib import db`).
    if ROUTES_DIR not in sys.path:
        sys.path.insert(0, ROUTES_DIR)
        sys.path_importer_cache.pop(ROUTES_DIR, None)


def load_route(file):
    """Import the route file `file` (relative to `routes/`) and return the module."""
    global _route_counter
    _enable_route_imports()
    if file.startswith("/") or ".." in file.split("/"):
        raise ImportError(f"route file outside routes/: {file}")
    path = os.path.join(ROUTES_DIR, file)
    with open(path, "rb") as handle:
        source = handle.read()
    code = compile(source, path, "exec", dont_inherit=True)
    _route_counter += 1
    name = f"_filerouter_route_{_route_counter}"
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def error_report(exc):
    """A `ProjectError` for `exc`: its type, message, project file and line, project frames."""
    frames = []
    for summary in traceback.extract_tb(exc.__traceback__):
        rel = project_path(summary.filename)
        if rel is not None:
            frames.append(Frame(file=rel, line=summary.lineno or 0, function=summary.name))
    file = line = None
    # SyntaxError, and settings.ConfigError, point at a file and line of their own.
    located = getattr(exc, "filename", None)
    message = str(exc)
    if isinstance(located, str) and project_path(located) and getattr(exc, "lineno", None):
        file, line = project_path(located), exc.lineno
        frames.append(Frame(file=file, line=line, function="<module>"))
        message = getattr(exc, "msg", message)
    elif frames:
        file, line = frames[-1].file, frames[-1].line
    return ProjectError(
        kind=type(exc).__name__,
        message=message,
        file=file,
        line=line,
        frames=frames,
        traceback="".join(traceback.format_exception(exc)),
    )
