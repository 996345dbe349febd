"""Route modules imported at build time, for `filerouter run`.

`filerouter build` calls `bake` once with the source of every `.py` file under `routes/`, then
snapshots the instance. Production instances start from that snapshot: the route modules are
already imported (`MODULES`), and helpers in private folders (`from _lib import db`) are found
through `SourceFinder` from the sources kept here, since production instances see no files.

Each production instance still starts fresh from the snapshot, so a handler that changes a
module global changes it for its own request only.
"""

import importlib.abc
import importlib.util
import sys

# Route file (relative to routes/) -> the module imported at build time.
MODULES = {}
# Root file (`middleware.py`, `docs.py`, `not-found.py`) -> its module, imported at build time.
ROOT_MODULES = {}
# Source of every .py file under routes/, keyed by its path relative to routes/.
SOURCES = {}


class SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the project's own helper modules from `SOURCES` instead of the filesystem."""

    def _path(self, fullname):
        """(path of the module's source, is a package); a folder without `__init__.py` is a
        namespace package with no source of its own (path "")."""
        base = fullname.replace(".", "/")
        if base + "/__init__.py" in SOURCES:
            return base + "/__init__.py", True
        if base + ".py" in SOURCES:
            return base + ".py", False
        if any(path.startswith(base + "/") for path in SOURCES):
            return "", True
        return None, False

    def find_spec(self, fullname, path=None, target=None):
        rel, package = self._path(fullname)
        if rel is None:
            return None
        spec = importlib.util.spec_from_loader(fullname, self, origin="/routes/" + rel, is_package=package)
        spec.has_location = bool(rel)
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        rel, _ = self._path(module.__name__)
        if not rel:
            return
        module.__file__ = "/routes/" + rel
        code = compile(SOURCES[rel], module.__file__, "exec", dont_inherit=True)
        exec(code, module.__dict__)


def install(files):
    """Keep `files` ((path, source) pairs) importable through `SourceFinder`."""
    SOURCES.update(dict(files))
    if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())
