"""Bytecode for the project's packages, compiled once by `filerouter packages install`.

A package's modules are compiled from source on every import that finds no bytecode: `dev`'s
start (its snapshot of the packages compiles all of them), every `filerouter db` command
(SQLAlchemy and Alembic, a few seconds each) and `filerouter build`. `compile_tree` writes each
module's bytecode beside it, where CPython's own import system looks for it
(`__pycache__/NAME.cpython-314.pyc`), once, when the packages are installed; `cached_code` reads
it for the packages `build` and `dev` hand the guest as bytes (`baked.PackageFinder`). Both use
hash-checked files (PEP 552): a module whose source changed since is compiled from it again, so
a stale file costs time, never correctness.

Not here: importing the packages (`baked`, and CPython's path finder over `/packages` in `dev`).
"""

import importlib.util
import marshal
import os
import types

# CPython's flags word of a hash-based pyc (PEP 552): bit 0, hash-based; bit 1, checked.
_CHECKED_HASH = 0b11


def compile_tree(root, shown):
    """Compile every `.py` file under `root` to its `__pycache__` file, with the file name
    `shown` + its path below `root` (the name it is imported by). Returns how many compiled; one
    that does not (a syntax error, a file that cannot be read) is left out."""
    import py_compile  # noqa: PLC0415  (only this call needs it)

    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            try:
                py_compile.compile(
                    path,
                    dfile=shown + path[len(root) :],
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                )
            except (py_compile.PyCompileError, OSError, ValueError):
                continue
            count += 1
    return count


def cached_code(rel, source, files):
    """The code of the module whose source `source` is `files[rel]`, from the compiled file
    `compile_tree` wrote beside it in `files` (path -> bytes), if it was compiled from this very
    source by this interpreter; else None (the caller compiles the source)."""
    data = files.get(importlib.util.cache_from_source(rel))
    if data is None or len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    if int.from_bytes(data[4:8], "little") != _CHECKED_HASH:
        return None
    if data[8:16] != importlib.util.source_hash(source):
        return None
    try:
        code = marshal.loads(memoryview(data)[16:])
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None
