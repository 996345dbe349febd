"""Third-party packages built into the guest: pydantic 2 and the packages it imports.

host/build.rs puts them into a folder that componentize-py gets as one more path
(host/guest-packages.txt pins them): pydantic, annotated_types, typing_extensions and
typing_inspection from PyPI's wheels, and pydantic_core with its Rust part compiled for the sandbox
from its sdist. Those files exist only while the guest is built: only what is imported now, at build
time, is in the snapshot. So every module of these packages is imported here, except those in
`importing.LEFT_OUT` (route code is told why when it imports one), and a model is built, validated
and dumped once, so that pydantic's first-use work (its plugin scan, schema caches) is in the
snapshot too. A module that fails to import stops the build: a guest is never built without them.

Not for: a project's own packages (`filerouter packages install` puts those in the project).
"""

import importlib
import pkgutil

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
_first_use()
