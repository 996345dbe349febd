"""Route modules imported at build time, for `filerouter run`.

`filerouter build` calls `bake` once with the source of every `.py` file under `routes/`, then
snapshots the instance. Production instances start from that snapshot: the route modules are
already imported (`MODULES`), and helpers in private folders (`from _lib import db`) are found
through `SourceFinder` from the sources kept here, since production instances see no files.

Each production instance still starts fresh from the snapshot, so a handler that changes a
module global changes it for its own request only.
"""

import importlib.abc
import importlib.metadata
import importlib.resources.abc
import importlib.util
import io
import re
import sys

import bytecode
import importing

# Route file (relative to routes/) -> the module imported at build time.
MODULES = {}
# Root file (`middleware.py`, `docs.py`, `not-found.py`) -> its module, imported at build time.
ROOT_MODULES = {}
# Source of every .py file under routes/, keyed by its path relative to routes/.
SOURCES = {}
# Every file of the project's `.packages/` (filerouter packages install), keyed by its path
# relative to it: modules are imported from here, data files read through `get_data`.
PACKAGES = {}
PACKAGES_ROOT = "/packages/"
# The code of every module of `PACKAGES`, compiled ahead of its import (`compile_packages`), by
# its path there: `dev`'s snapshot of the packages, so that importing one only runs it.
COMPILED = {}


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
        # After the standard library's finder: a route folder (`routes/email/`) never shadows
        # a standard-library module.
        sys.meta_path.insert(importing.after_stdlib(), SourceFinder())


class PackageFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the project's packages (`.packages/`) from `PACKAGES`: production instances see
    no files. Data files inside them are readable with `get_data` (`pkgutil.get_data`)."""

    def _path(self, fullname):
        base = fullname.replace(".", "/")
        if base + "/__init__.py" in PACKAGES:
            return base + "/__init__.py", True
        if base + ".py" in PACKAGES:
            return base + ".py", False
        return None, False

    def find_spec(self, fullname, path=None, target=None):
        rel, package = self._path(fullname)
        if rel is None:
            return None
        spec = importlib.util.spec_from_loader(fullname, self, origin=PACKAGES_ROOT + rel, is_package=package)
        spec.has_location = True
        if package:
            spec.submodule_search_locations = [PACKAGES_ROOT + rel.rsplit("/", 1)[0]]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        rel, _ = self._path(module.__name__)
        module.__file__ = PACKAGES_ROOT + rel
        code = COMPILED.get(rel)
        if code is None:
            code = bytecode.cached_code(rel, PACKAGES[rel], PACKAGES)
        if code is None:
            code = compile(PACKAGES[rel], module.__file__, "exec", dont_inherit=True)
        exec(code, module.__dict__)

    def get_data(self, path):
        rel = path[len(PACKAGES_ROOT):] if path.startswith(PACKAGES_ROOT) else path
        if rel not in PACKAGES:
            raise FileNotFoundError(path)
        return PACKAGES[rel]

    def get_resource_reader(self, fullname):
        rel, package = self._path(fullname)
        if rel is None or not package:
            return None
        return _PackageResources(rel.rsplit("/", 1)[0])

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        """`importlib.metadata` for the baked packages, from their `.dist-info` folders in
        `PACKAGES` (pydantic reads email-validator's version so before it validates an
        `EmailStr`)."""
        wanted = None if context.name is None else _normalize(context.name)
        for folder in sorted({path.split("/", 1)[0] for path in PACKAGES if "/" in path}):
            if not folder.endswith(".dist-info"):
                continue
            if wanted is None or _normalize(folder[: -len(".dist-info")].split("-", 1)[0]) == wanted:
                yield _BakedDistribution(folder)


def _normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


class _BakedDistribution(importlib.metadata.Distribution):
    """A baked package's metadata: the files of its `.dist-info` folder in `PACKAGES`."""

    def __init__(self, folder):
        self._folder = folder

    def read_text(self, filename):
        data = PACKAGES.get(self._folder + "/" + filename)
        return None if data is None else data.decode("utf-8")

    def locate_file(self, path):
        return _BakedPath(str(path))


class _PackageResources(importlib.resources.abc.TraversableResources):
    """`importlib.resources.files(package)` for a baked package (zoneinfo reads tzdata so)."""

    def __init__(self, folder):
        self.folder = folder

    def files(self):
        return _BakedPath(self.folder)


class _BakedPath(importlib.resources.abc.Traversable):
    """A file or folder of `PACKAGES`, read-only."""

    def __init__(self, rel):
        self.rel = rel.strip("/")

    @property
    def name(self):
        return self.rel.rsplit("/", 1)[-1]

    def is_file(self):
        return self.rel in PACKAGES

    def is_dir(self):
        prefix = self.rel + "/"
        return any(path.startswith(prefix) for path in PACKAGES)

    def exists(self):
        # `importlib.metadata.files()` keeps the listed files that exist.
        return self.is_file() or self.is_dir()

    def iterdir(self):
        prefix = self.rel + "/"
        children = sorted({path[len(prefix):].split("/", 1)[0] for path in PACKAGES if path.startswith(prefix)})
        return iter([_BakedPath(prefix + child) for child in children])

    def joinpath(self, *parts):
        return _BakedPath("/".join([self.rel, *[str(p).strip("/") for p in parts]]))

    __truediv__ = joinpath

    def open(self, mode="r", *args, **kwargs):
        if self.rel not in PACKAGES:
            raise FileNotFoundError(PACKAGES_ROOT + self.rel)
        data = PACKAGES[self.rel]
        if "b" in mode:
            return io.BytesIO(data)
        return io.TextIOWrapper(io.BytesIO(data), *args, **kwargs)

    def read_bytes(self):
        with self.open("rb") as handle:
            return handle.read()

    def read_text(self, encoding=None):
        with self.open("r", encoding=encoding) as handle:
            return handle.read()

    def __str__(self):
        return PACKAGES_ROOT + self.rel


def install_packages(files):
    """Keep the project's package files ((path, bytes) pairs) importable through
    `PackageFinder`."""
    if not files:
        return
    PACKAGES.update({path: bytes(data) for path, data in files})
    if not any(isinstance(f, PackageFinder) for f in sys.meta_path):
        sys.meta_path.append(PackageFinder())


def compile_packages():
    """Compile every module of `PACKAGES` and keep its code in `COMPILED` (unmarshalled, when
    `filerouter packages install` compiled it: `bytecode`). One that does not compile is left
    out: importing it raises the `SyntaxError` then, as it would have."""
    for rel, data in list(PACKAGES.items()):
        if not rel.endswith(".py"):
            continue
        code = bytecode.cached_code(rel, data, PACKAGES)
        if code is not None:
            COMPILED[rel] = code
            continue
        try:
            COMPILED[rel] = compile(data, PACKAGES_ROOT + rel, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            pass
    # The compiled files have served: the packages' files are what route code may read.
    for rel in [rel for rel in PACKAGES if rel.startswith("__pycache__/") or "/__pycache__/" in rel]:
        del PACKAGES[rel]


def top_level_names():
    """The importable top-level names of the installed packages."""
    names = set()
    for path in PACKAGES:
        first = path.split("/", 1)[0]
        if first.endswith((".dist-info", ".egg-info", ".data")) or first.startswith((".", "_")):
            continue
        if "/" in path and path.endswith("/__init__.py") and path.count("/") == 1:
            names.add(first)
        elif "/" not in path and path.endswith(".py"):
            names.add(path[:-3])
    return sorted(names)


def import_packages():
    """Import every top-level package now, so the snapshot carries it. One that does not import
    in the sandbox is left out here; a route that imports it reports the error at build."""
    for name in top_level_names():
        before = set(sys.modules)
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            for added in set(sys.modules) - before:
                sys.modules.pop(added, None)
