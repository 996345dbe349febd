"""What route code can import, and what it is told when it cannot.

- **The whole standard library.** The modules `preload` imports at build time are in the
  snapshot. Any other pure-Python module of the standard library is loaded when it is first
  imported, from the host (`stdlib.get` in wit/filerouter.wit): code that this very CPython
  compiled when the binary was built (`host/stdlib.py`), so the import costs an unmarshal, never
  a compile, in `dev` and `run` alike. `StdlibFinder` is first on `sys.meta_path`: a project's
  file or folder never shadows a standard-library module (a route folder `routes/email/`, say).
- **Clear refusals.** A module of the standard library the sandbox cannot have (native code it
  was built without, terminals, processes, Windows) raises `ModuleNotFoundError` saying why and
  what to use instead (`UNAVAILABLE`); so do FastAPI's and its neighbours' names when the project
  has not installed them (`ADVICE`).
- **The guest's own modules are not route code's.** `seal()` (the end of the build-time import)
  lists the guest's internal modules (dispatcher, project, baked, ...) and componentize-py's
  (wit_world, componentize_py_*); `hide()` (the start of every call) takes them out of
  `sys.modules`, so route code cannot import them and a project's own `settings.py` is not
  shadowed by the guest's. Guest code keeps what it imported at module level: it must never
  import one of its own modules by name later (inside a function), which would fail once hidden.

The finder is installed by `install()` at the end of the build-time import (dispatcher.py): the
build (componentize-py's initialization) has no host to ask, and imports from its files.
"""

import _imp
import importlib.machinery
import marshal
import os
import sys

from wit_world.imports import stdlib as _host

# The file names the standard library's code carries (its modules were compiled from there, as
# those imported at build time were).
ROOT = "/python/"

# The guest's top-level modules (and packages) that route code imports: the public `filerouter`
# and the stand-ins that take a module's own name (guest-python/stand_ins/: `bcrypt` and
# `argon2` are the sandbox's own password hashing). Every other module of guest-python/ is
# internal: sandbox/, and the stand-ins installed under the standard library's names.
PUBLIC = frozenset({"filerouter", "sqlite3", "bcrypt", "argon2"})
# componentize-py's modules: the generated bindings and its runtime's helpers.
_RUNTIME = ("wit_world", "componentize_py_types", "componentize_py_async_support", "poll_loop")
# Built into the interpreter, so the builtin importer would make it again (and fail).
_HIDDEN_BUILTIN = frozenset({"componentize_py_runtime"})

_PLUGIN = "native code runs in a plugin, a WebAssembly component of its own (docs/guides/plugins.md)"
_COMPRESS = "use `zlib` or `gzip`, which are built in"
_DATABASE = "and route code has no files to keep a database in: use `filerouter.kv` or `sqlite3` (the project's database)"
_TERMINAL = "and a request has no terminal: `print()` and `logging` write to filerouter's log"
_GUI = "it needs Tk, a desktop GUI toolkit the sandbox does not have: a route answers with HTML (`HTMLResponse`) instead"
_PROCESSES = "the sandbox cannot start processes (WebAssembly has none): do the work in the handler"
_THREADS = "the sandbox cannot start threads: do the work in the handler (`asyncio` tasks work)"
_WINDOWS = "it exists on Windows only"

# Modules of the standard library that route code cannot import, and why (checked for a name
# and each of its parents: `ctypes.util` is refused as `ctypes` is). README, "What route code
# can import", lists them.
UNAVAILABLE = {
    **dict.fromkeys(
        ("ctypes", "_ctypes"),
        f"it calls native libraries through libffi (`_ctypes`), which CPython compiled to WebAssembly does not have; {_PLUGIN}",
    ),
    **dict.fromkeys(
        ("bz2", "_bz2", "compression.bz2", "encodings.bz2_codec"),
        f"the sandbox's CPython is built without libbz2 (`_bz2`): {_COMPRESS}",
    ),
    **dict.fromkeys(
        ("lzma", "_lzma", "compression.lzma"),
        f"the sandbox's CPython is built without liblzma (`_lzma`): {_COMPRESS}",
    ),
    **dict.fromkeys(
        ("compression.zstd", "_zstd"),
        f"the sandbox's CPython is built without libzstd (`_zstd`): {_COMPRESS}",
    ),
    **dict.fromkeys(
        ("dbm.gnu", "_gdbm"),
        f"the sandbox's CPython is built without GNU dbm (`_gdbm`), {_DATABASE}",
    ),
    **dict.fromkeys(
        ("dbm.ndbm", "_dbm"),
        f"the sandbox's CPython is built without ndbm (`_dbm`), {_DATABASE}",
    ),
    **dict.fromkeys(
        ("curses", "_curses", "_curses_panel"),
        f"it draws on a terminal; the sandbox's CPython is built without curses, {_TERMINAL}",
    ),
    "readline": f"it edits a terminal's input line; the sandbox's CPython is built without it, {_TERMINAL}",
    **dict.fromkeys(
        (
            "termios",
            "tty",
            "pty",
            "_pyrepl.fancy_termios",
            "_pyrepl.readline",
            "_pyrepl.simple_interact",
            "_pyrepl.unix_console",
            "_pyrepl.unix_eventqueue",
        ),
        f"it controls a terminal; WebAssembly (WASI) has no `termios`, {_TERMINAL}",
    ),
    **dict.fromkeys(("tkinter", "_tkinter", "turtle", "turtledemo", "idlelib"), _GUI),
    **dict.fromkeys(
        ("multiprocessing", "concurrent.futures.process", "_multiprocessing", "_posixshmem", "_posixsubprocess"),
        _PROCESSES,
    ),
    **dict.fromkeys(
        ("concurrent.interpreters", "concurrent.futures.interpreter", "_interpreters", "_interpqueues", "_interpchannels"),
        f"it runs subinterpreters in threads: {_THREADS}",
    ),
    **dict.fromkeys(
        ("asyncio.tools", "_remote_debugging"),
        "it inspects other running processes, which the sandbox cannot see",
    ),
    "mmap": "WebAssembly (WASI) has no memory-mapped files: use `bytes`, `bytearray` or `io.BytesIO`",
    "fcntl": "WebAssembly (WASI) has no `fcntl` (file locks, descriptor flags): coordinate requests with the database's transactions or `filerouter.kv.compare_and_set`",
    **dict.fromkeys(("grp", "pwd"), "WebAssembly (WASI) has no users or groups"),
    "resource": "WebAssembly (WASI) has no process resource limits: the sandbox's limits are config.py's `sandbox` settings (`memory_mb`, `cpu_ms`, `wall_s`)",
    "syslog": "WebAssembly (WASI) has no system log: `print()` and `logging` write to filerouter's log",
    "_ssl": "the sandbox's CPython is built without OpenSSL, and the sandbox has no network: `ssl` is a stand-in whose contexts raise `ssl.SSLError`",
    "_hashlib": "the sandbox's CPython is built without OpenSSL: `hashlib` works without it (md5, sha1, the sha2 and sha3 families and blake2 are built in)",
    "_uuid": "the sandbox's CPython is built without libuuid: `uuid` works without it",
    **dict.fromkeys(
        ("ensurepip", "venv"),
        "it installs pip or makes virtual environments, with subprocesses: install packages with `filerouter packages install`",
    ),
    **dict.fromkeys(
        (
            "msvcrt",
            "nt",
            "winreg",
            "winsound",
            "_winapi",
            "_overlapped",
            "_wmi",
            "asyncio.windows_events",
            "asyncio.windows_utils",
            "encodings.mbcs",
            "encodings.oem",
            "_pyrepl.windows_console",
        ),
        _WINDOWS,
    ),
    "_scproxy": "it exists on macOS only",
}

_FROM_FILEROUTER = (
    "filerouter speaks FastAPI's API without it: import these names from `filerouter` instead "
    "(`from filerouter import Depends, HTTPException, Request, Query, Body, Header, Form, File, "
    "UploadFile, JSONResponse, HTMLResponse, RedirectResponse`), and make each path a file under "
    "routes/ instead of an `@app.get` (docs/porting.md)"
)

# Packages a ported FastAPI app imports that the sandbox does without, and what to do instead:
# said when the project has not installed them.
ADVICE = {
    "fastapi": _FROM_FILEROUTER,
    "starlette": _FROM_FILEROUTER,
    "uvicorn": "filerouter serves the routes itself: `filerouter dev`, or `filerouter build` and `filerouter run`",
}


# Modules of the packages built into the guest (bundled.py: pydantic and what it imports) that it
# leaves out, and why. README, "Pydantic in the sandbox", lists them.
LEFT_OUT = {
    **dict.fromkeys(
        ("pydantic.mypy", "pydantic.v1.mypy"),
        "it is pydantic's plugin for mypy, which type-checks on your machine, not in a request",
    ),
    "pydantic.v1._hypothesis_plugin": (
        "it is pydantic's plugin for Hypothesis, a testing library, which runs on your machine, not in a request"
    ),
}


def left_out(name):
    """Why the bundled packages' module `name` is not in the guest, or None."""
    while name:
        reason = LEFT_OUT.get(name)
        if reason is not None:
            return reason
        name = name.rpartition(".")[0]
    return None


def unavailable(name):
    """Why the standard-library module `name` cannot be imported in the sandbox, or None."""
    while name:
        reason = UNAVAILABLE.get(name)
        if reason is not None:
            return reason
        name = name.rpartition(".")[0]
    return None


def _refuse(name, reason):
    return ModuleNotFoundError(f"No module named {name!r} in the filerouter sandbox: {reason}", name=name)


class StdlibLoader:
    """Runs a standard-library module from the code the host sent (the spec's `loader_state`)."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        spec = module.__spec__
        data, spec.loader_state = spec.loader_state, None
        if data is None:
            data = self._data(spec.name)
        exec(marshal.loads(data), module.__dict__)

    def _data(self, name):
        found = _host.get(name)
        if found is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return found.code

    # For runpy, inspect and pkgutil.
    def get_code(self, name):
        return marshal.loads(self._data(name))

    def get_source(self, name):
        return None

    def is_package(self, name):
        found = _host.get(name)
        return bool(found and found.is_package)


class StdlibFinder:
    """First on `sys.meta_path`: a standard-library module comes from the interpreter (built in,
    frozen), from the host (`StdlibLoader`), or not at all, with the reason when the sandbox
    cannot have it. Other names are left to the finders after it."""

    stdlib = True

    def __init__(self):
        self.loader = StdlibLoader()

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top not in sys.stdlib_module_names:
            if _hidden and fullname in _HIDDEN_BUILTIN:
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            reason = left_out(fullname)
            if reason is not None:
                raise _refuse(fullname, reason)
            advice = ADVICE.get(top)
            return self._elsewhere(fullname, path, target, advice) if advice else None
        if fullname in sys.builtin_module_names:
            return importlib.machinery.BuiltinImporter.find_spec(fullname, path, target)
        if _imp.is_frozen(fullname):
            return importlib.machinery.FrozenImporter.find_spec(fullname, path, target)
        reason = unavailable(fullname)
        if reason is not None:
            raise _refuse(fullname, reason)
        found = _host.get(fullname)
        if found is None:
            return None
        rel = fullname.replace(".", "/")
        origin = ROOT + rel + ("/__init__.py" if found.is_package else ".py")
        spec = importlib.machinery.ModuleSpec(
            fullname, self.loader, origin=origin, loader_state=found.code, is_package=found.is_package
        )
        spec.has_location = True
        if found.is_package:
            spec.submodule_search_locations = [ROOT + rel]
        return spec

    def _elsewhere(self, fullname, path, target, advice):
        """The module from the finders after this one, or the advice as the ImportError."""
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec
        raise _refuse(fullname, advice)


def install():
    """Put `StdlibFinder` first on `sys.meta_path` (once)."""
    if not any(getattr(f, "stdlib", False) for f in sys.meta_path):
        sys.meta_path.insert(0, StdlibFinder())


def after_stdlib():
    """The index on `sys.meta_path` just after `StdlibFinder` (0 without it): where a finder of
    project code goes, so that it never shadows the standard library."""
    for i, finder in enumerate(sys.meta_path):
        if getattr(finder, "stdlib", False):
            return i + 1
    return 0


_HIDE = ()
_hidden = False
# The modules `hide()` took out of `sys.modules`, by name: still the guest's, only not route
# code's (`immortal` walks them with `sys.modules`).
_HIDDEN_MODULES = {}


def seal():
    """List the guest's internal modules, for `hide()`. Called at the end of the build-time
    import, when every one of them is loaded."""
    global _HIDE
    guest = os.path.dirname(os.path.abspath(__file__)) + os.sep
    names = []
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        if top in PUBLIC:
            continue
        file = getattr(module, "__file__", None) or ""
        # `ssl` is nossl.py under the standard library's name: public.
        ours = file.startswith(guest) and getattr(module, "__name__", None) == name
        if ours or top in _RUNTIME or top in _HIDDEN_BUILTIN:
            names.append(name)
    _HIDE = tuple(sorted(names))


def hide():
    """Take the guest's internal modules out of `sys.modules`, once per instance (a build's
    snapshot keeps them out, so `run`'s instances have nothing to do)."""
    global _hidden
    if _hidden:
        return
    _hidden = True
    for name in _HIDE:
        module = sys.modules.pop(name, None)
        if module is not None:
            _HIDDEN_MODULES[name] = module


def hidden():
    """The guest's internal modules that `hide()` took out of `sys.modules`, by name."""
    return _HIDDEN_MODULES
