"""Loading the project's Python files inside the sandbox, and reporting their failures.

Route files are read from the read-only `/routes` preopen and executed as fresh modules (every
call runs in a fresh instance, so nothing is cached between requests). Exceptions are turned into
`ProjectError` records that name the project file and line and keep only project frames.
`recording_imports()` notes which project files a route's import loaded, for `dev`'s reload.
"""

import builtins
import contextlib
import difflib
import os
import sys
import traceback
import types

import baked
import importing
import wit_text
from filerouter import environment as _environment
from filerouter.exceptions import ProjectCodeError

from wit_world.imports.types import Frame, ProjectError

ROUTES_DIR = "/routes"
# The project's `.packages/` (filerouter packages install), mounted read-only in development.
PACKAGES_DIR = "/packages"
_route_counter = 0


def project_path(filename):
    """The path of a sandbox file relative to the project root, or None if it is not project code."""
    if filename.startswith(ROUTES_DIR + "/"):
        return filename[1:]
    if filename.startswith("/project/"):
        return filename[len("/project/"):]
    return None


def _enable_route_imports():
    # Let route files import helpers from private folders (`from _lib import db`), and the
    # project's packages when `.packages/` is mounted (development; a build bakes them).
    if ROUTES_DIR not in sys.path:
        sys.path.insert(0, ROUTES_DIR)
        sys.path_importer_cache.pop(ROUTES_DIR, None)
        if not baked.PACKAGES and os.path.isdir(PACKAGES_DIR):
            sys.path.insert(1, PACKAGES_DIR)
            sys.path_importer_cache.pop(PACKAGES_DIR, None)


def load_route(file):
    """The module of route file `file` (relative to `routes/`).

    In production it was imported at build time (`baked`); in development it is imported now,
    from the read-only `/routes` preopen.
    """
    if file in baked.MODULES:
        return baked.MODULES[file]
    _enable_route_imports()
    if file.startswith("/") or ".." in file.split("/"):
        raise ImportError(f"route file outside routes/: {file}")
    path = os.path.join(ROUTES_DIR, file)
    if file in baked.SOURCES:
        return _exec_route(path, baked.SOURCES[file].encode())
    with open(path, "rb") as handle:
        source = handle.read()
    return _exec_route(path, source)


# `dev` sends the `.py` files under `routes/` with a call, each named so, when its instance
# starts from a snapshot of the packages alone (which cannot open `/routes`).
ROUTE_SOURCE_PREFIX = "routes:"


def install_route_sources(sources):
    """Make the route files among `sources` ((name, source) pairs, see
    `ROUTE_SOURCE_PREFIX`) importable, as a build's are (`baked.SourceFinder`)."""
    files = [(name[len(ROUTE_SOURCE_PREFIX):], source) for name, source in sources if name.startswith(ROUTE_SOURCE_PREFIX)]
    if files:
        baked.install(files)


ROOT_FILES = ("middleware.py", "docs.py", "not-found.py", "startup.py")

# `filerouter dev --overrides FILE` (the TestClient's `dependency_overrides=`) sends FILE's
# source with every call, under this prefix and FILE's path in the project. Never in production.
OVERRIDES_PREFIX = "overrides:"


def load_overrides(sources):
    """The test-only `dependency_overrides` mapping of the overrides file among `sources` (an
    empty one if there is none): {dependency: replacement}, both callables."""
    for name, source in sources.items():
        if name.startswith(OVERRIDES_PREFIX):
            break
    else:
        return {}
    path = "/project/" + name[len(OVERRIDES_PREFIX):]
    _enable_route_imports()
    module = _exec_route(path, source.encode())
    overrides = getattr(module, "dependency_overrides", None)
    if not isinstance(overrides, dict) or not all(callable(k) and callable(v) for k, v in overrides.items()):
        raise ProjectCodeError(
            "the overrides file must define `dependency_overrides`, a dict from each dependency to "
            "its replacement (both functions), e.g. `dependency_overrides = {get_db: fake_db}`",
            filename=path,
            lineno=1,
        )
    return overrides


def load_root(name, sources):
    """The module of the project's root file `name` (`middleware.py`, ...), or None if the
    project has none. In production it was baked; in development its source is in `sources`
    (the host reads it, since the sandbox sees no root files)."""
    if name in baked.ROOT_MODULES:
        return baked.ROOT_MODULES[name]
    source = sources.get(name)
    if source is None:
        return None
    _enable_route_imports()
    return _exec_route("/project/" + name, source.encode())


def bake(files, routes, root_files, packages=(), keep_compiled=False):
    """Import the project's packages, every route in `routes` and every root file from the
    sources given, for the build snapshot (or `dev`'s). `keep_compiled`: compile every module of
    the packages too (`baked.compile_packages`)."""
    from filerouter import params  # noqa: PLC0415  (the guest's module, not project code)

    # The packages too: a declared name read at import time fails here, not quietly.
    with _environment.importing():
        _bake(files, routes, root_files, packages, params, keep_compiled)


def _bake(files, routes, root_files, packages, params, keep_compiled):
    baked.install(files)
    baked.install_packages(packages)
    if keep_compiled:
        baked.compile_packages()
    baked.import_packages()
    for file in routes:
        path = os.path.join(ROUTES_DIR, file)
        module = baked.MODULES[file] = _exec_route(path, baked.SOURCES[file].encode())
        # Handlers' signatures go into the snapshot too: requests then skip `inspect`.
        for name in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"):
            fn = getattr(module, name, None)
            if callable(fn):
                try:
                    params.warm(fn, _path_names(file))
                except Exception:  # noqa: BLE001  (a bad signature is reported per request)
                    pass
    for name, source in root_files:
        baked.ROOT_MODULES[name] = _exec_route("/project/" + name, source.encode())


def _path_names(file):
    """The path parameters of the route file `file` (`users/[id]/route.py`: `id`), in path
    order, as the host names them in a request's target."""
    names = []
    for folder in file.split("/")[:-1]:
        if folder.startswith("[[...") and folder.endswith("]]"):
            names.append(folder[5:-2])
        elif folder.startswith("[...") and folder.endswith("]"):
            names.append(folder[4:-1])
        elif folder.startswith("[") and folder.endswith("]"):
            names.append(folder[1:-1])
    return names


class _ImportRecorder:
    """A finder on `sys.meta_path`, just after the standard library's, while a route file is
    inspected: it asks the finders after it, as the import system would, and notes the project
    file of each spec found. A spec is found before its module runs, so a helper that fails to
    import is noted too. Costs a loop over a few finders per import, during inspections only."""

    def __init__(self):
        self.files = set()

    def find_spec(self, fullname, path=None, target=None):
        after = False
        for finder in list(sys.meta_path):
            if finder is self:
                after = True
                continue
            find = getattr(finder, "find_spec", None)
            if not after or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                rel = project_path(spec.origin or "")
                if rel is not None:
                    self.files.add(rel)
                return spec
        return None


@contextlib.contextmanager
def recording_imports():
    """A set that fills with the project files (`routes/_lib/db.py`) imported inside the block."""
    recorder = _ImportRecorder()
    sys.meta_path.insert(importing.after_stdlib(), recorder)
    try:
        yield recorder.files
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(recorder)


def _exec_route(path, source):
    global _route_counter
    code = compile(source, path, "exec", dont_inherit=True)
    _route_counter += 1
    name = f"_filerouter_route_{_route_counter}"
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    # Module-level code may not read the operator's values: they exist only during requests.
    with _environment.importing():
        exec(code, module.__dict__)
    return module


def _innermost_project_frame(tb):
    found = None
    while tb is not None:
        if project_path(tb.tb_frame.f_code.co_filename) is not None:
            found = tb.tb_frame
        tb = tb.tb_next
    return found


def _close(name, candidates):
    names = sorted({c for c in candidates if isinstance(c, str) and not c.startswith("__")})
    return difflib.get_close_matches(name, names, n=1, cutoff=0.6)


def suggestions_for(exc):
    """Likely fixes for `exc`, most likely first."""
    out = list(getattr(exc, "suggestions", ()))
    if isinstance(exc, NameError) and getattr(exc, "name", None):
        frame = _innermost_project_frame(exc.__traceback__)
        scope = list(vars(builtins))
        if frame is not None:
            scope += list(frame.f_locals) + list(frame.f_globals)
        for match in _close(exc.name, scope):
            out.append(f"Did you mean `{match}`?")
        if exc.name in ("true", "false", "null", "none"):
            out.append("Python spells these `True`, `False` and `None`")
    elif isinstance(exc, AttributeError) and getattr(exc, "name", None) and getattr(exc, "obj", None) is not None:
        for match in _close(exc.name, dir(exc.obj)):
            out.append(f"Did you mean `.{match}`?")
    elif isinstance(exc, ModuleNotFoundError):
        name = getattr(exc, "name", None) or ""
        top = name.split(".")[0]
        # A standard-library module the sandbox cannot have, or a FastAPI name: the message
        # says why and what to use instead. Otherwise the module is not installed.
        if top and top not in sys.stdlib_module_names and top not in importing.ADVICE:
            stdlib = [m for m in sys.stdlib_module_names if not m.startswith("_") and importing.unavailable(m) is None]
            for match in _close(top, stdlib):
                if match != top:
                    out.append(f"Did you mean `{match}`?")
            out.append(
                f"`{top}` is neither in the standard library nor in the project. A pure-Python package "
                "from PyPI can be: list it in requirements.txt and run `filerouter packages install` "
                "(packages with native code cannot run in the sandbox). Your own helpers go in private "
                "folders under routes/ (`routes/_lib/helpers.py`, imported as `_lib.helpers`)."
            )
    elif isinstance(exc, IndentationError):
        out.append("Indent with 4 spaces and do not mix tabs and spaces")
    elif isinstance(exc, SyntaxError):
        message = str(getattr(exc, "msg", ""))
        if "never closed" in message or "unexpected EOF" in message:
            out.append("A bracket or quote opened here is never closed")
        elif "expected ':'" in message:
            out.append("`def`, `if`, `for`, `while`, `with` and `class` lines end with a colon")
    elif isinstance(exc, KeyError):
        out.append("Use `.get(key)` (for example `request.query_params.get(name)`) when a key may be absent")
    elif isinstance(exc, MemoryError):
        out.append("The request ran out of sandbox memory: raise `sandbox = {'memory_mb': ...}` in config.py")
    return out


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
    # Messages and tracebacks may quote text that is not Unicode (a lone surrogate): escape it.
    safe = wit_text.safe
    return ProjectError(
        kind=safe(type(exc).__name__),
        message=safe(message),
        file=safe(file),
        line=line,
        frames=[Frame(file=safe(f.file), line=f.line, function=safe(f.function)) for f in frames],
        traceback=safe("".join(traceback.format_exception(exc))),
        suggestions=[safe(s) for s in suggestions_for(exc)],
    )
