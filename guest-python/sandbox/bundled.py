"""Third-party packages built into the guest: pydantic 2 and the packages it imports.

The guest's build (guest-python/build/) puts them into a folder that componentize-py gets as one
more path (host/guest-packages.txt pins them): pydantic, annotated_types, typing_extensions and
typing_inspection from PyPI's wheels, and pydantic_core with its Rust part compiled for the sandbox
from its sdist. Those files exist only while the guest is built: only what is imported now, at build
time, is in the snapshot. So every module of these packages is imported here, except those in
`importing.LEFT_OUT` (route code is told why when it imports one), and a model is built, validated
and dumped once, so that pydantic's first-use work (its plugin scan, schema caches) is in the
snapshot too. A module that fails to import stops the build: a guest is never built without them.

Their `.dist-info` metadata is kept in memory too (`DISTRIBUTIONS`), so `importlib.metadata`
answers for them in a request (`version("pydantic")`, the entry points pydantic scans for plugins)
as it would where they are installed: `METADATA` without its long description (the README it
carries, 140 kB for pydantic), the other files of the folder except licences, and a
`top_level.txt` read from `RECORD` (`packages_distributions()` would read the files themselves,
which are not there in a request: `files()` lists none).

Not for: a project's own packages (`filerouter packages install` puts those in the project).
"""

import importlib
import importlib.metadata
import os
import pathlib
import pkgutil
import re
import sys

import importing

# In dependency order.
PACKAGES = ("typing_extensions", "annotated_types", "typing_inspection", "pydantic_core", "pydantic")


def _skipped(name):
    return any(name == left or name.startswith(left + ".") for left in importing.LEFT_OUT)


def _import_tree(name):
    """Import module `name` and, if it is a package, every module under it, skipping the
    left-out ones (`pkgutil.walk_packages` would import a left-out package to look inside)."""
    module = importlib.import_module(name)
    for info in pkgutil.iter_modules(getattr(module, "__path__", None) or [], name + "."):
        if not _skipped(info.name):
            _import_tree(info.name)


def _import_all():
    for top in PACKAGES:
        _import_tree(top)


# Normalized distribution name -> (its folder's path when the guest was built, {file: text}).
DISTRIBUTIONS = {}


def _normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


class _Distribution(importlib.metadata.Distribution):
    """A bundled distribution's metadata, from memory: the files exist only at build time."""

    def __init__(self, site, files):
        self._site = site
        self._files = files

    def read_text(self, filename):
        return self._files.get(filename)

    def locate_file(self, path):
        # Where it was when the guest was built, as the modules' `__file__` says.
        return pathlib.Path(self._site, path)


class _DistributionFinder:
    """On `sys.meta_path` for `importlib.metadata` only (no `find_spec`: imports pass it by)."""

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        if context.name is None:
            names = sorted(DISTRIBUTIONS)
        else:
            names = [_normalize(context.name)]
        for name in names:
            found = DISTRIBUTIONS.get(name)
            if found is not None:
                yield _Distribution(*found)


def _keep_metadata():
    """Read every `.dist-info` beside the bundled packages into `DISTRIBUTIONS`, and put the
    finder that serves them first on `sys.meta_path` (the modules routes import are these, so
    their metadata is these too, whatever else is on the path)."""
    import pydantic

    site = os.path.dirname(os.path.dirname(pydantic.__file__))
    for folder in sorted(os.listdir(site)):
        if not folder.endswith(".dist-info"):
            continue
        files = {}
        for name in sorted(os.listdir(os.path.join(site, folder))):
            path = os.path.join(site, folder, name)
            if not os.path.isfile(path):
                continue  # licenses/
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            if name == "METADATA":
                # The headers (core metadata); the body after them is the long description.
                text = text.split("\n\n", 1)[0] + "\n"
            files[name] = text
        if "top_level.txt" not in files and "RECORD" in files:
            # What `importlib.metadata.packages_distributions()` reads: its files (`RECORD`) are
            # not there in a request, so what they would say is written down now.
            tops = set()
            for line in files["RECORD"].splitlines():
                first = line.split(",", 1)[0].split("/")
                if len(first) > 1 and not first[0].endswith(".dist-info") and first[0] not in ("..", "__pycache__"):
                    tops.add(first[0])
                elif len(first) == 1 and first[0].endswith(".py"):
                    tops.add(first[0][: -len(".py")])
            files["top_level.txt"] = "".join(top + "\n" for top in sorted(tops))
        meta = files.get("METADATA")
        if meta is None:
            raise ImportError(f"bundled {folder} has no METADATA")
        name = re.search(r"^Name:\s*(\S+)", meta, re.MULTILINE).group(1)
        DISTRIBUTIONS[_normalize(name)] = (site, files)
    missing = [top for top in PACKAGES if _normalize(top) not in DISTRIBUTIONS]
    if missing:
        raise ImportError(f"bundled packages without a .dist-info: {missing}")
    sys.meta_path.insert(0, _DistributionFinder())


def _first_use():
    from pydantic import BaseModel, Field, TypeAdapter

    class _Warm(BaseModel):
        name: str
        price: float = Field(gt=0)
        tags: list[str] = []

    model = _Warm.model_validate({"name": "x", "price": "1.5"})
    model.model_dump()
    model.model_dump_json()
    _Warm.model_validate_json('{"name": "x", "price": 2}')
    _Warm.model_json_schema()
    TypeAdapter(list[int]).validate_python(["1"])


_import_all()
_keep_metadata()
_first_use()
