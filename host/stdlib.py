"""Compiles the guest's standard library to code objects, for the guest's build.

componentize-py embeds CPython 3.14.0's standard library and mounts it at `/python` while it
builds a component. The guest's build script (`guest-python/build/build.rs`) builds a throwaway
component whose only module is this one, so this runs inside that build, on the very
interpreter that runs route code: it compiles every pure-Python module of the standard library
and writes them all, marshalled, to `stdlib.bin` beside itself (the folder is mounted writable
during the build). The host embeds the result
(`host/src/sandbox/stdlib.rs`) and hands a module's code to the guest when route code imports
one that the guest's snapshot does not hold (`guest-python/sandbox/importing.py`): such an import costs
an unmarshal, never a compile.

Left out: `site-packages/` and the build configuration (no modules), the packages that need
Tk, which CPython on WASI does not have (`tkinter`, `turtle`, `turtledemo`, `idlelib`),
CPython's frozen test packages (`__hello__`, `__phello__`), `sqlite3` (the guest has its own,
over the host's database) and `ssl` (the guest's stand-in, nossl.py), and `__main__` modules
(command-line entry points, run by `python -m`, not imported).

Compiled like CPython compiles an imported module (optimization level 0: docstrings and
asserts kept, as route code and packages may read `__doc__`), with the file name
`/python/<path>`, the name the modules imported at build time carry.

Format of `stdlib.bin`, little-endian: b"FRSTDLB1", u32 count, then for each module, by name:
u16 name length, the dotted name (UTF-8), u8 flags (1: a package), u32 code length,
`marshal.dumps(code)`.
"""

import marshal
import os
import struct
import sys

import json

ROOT = os.path.dirname(os.path.dirname(json.__file__))
SKIP_TOP = {
    "site-packages",
    "tkinter",
    "turtle",
    "turtledemo",
    "idlelib",
    "__hello__",
    "__phello__",
    "sqlite3",
    "ssl",
}
MAGIC = b"FRSTDLB1"


def modules():
    """(dotted name, path, is a package) of every module under ROOT."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(folder, ROOT)
        parts = [] if rel == "." else rel.split(os.sep)
        if parts and (parts[0] in SKIP_TOP or not os.path.isfile(os.path.join(folder, "__init__.py"))):
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            stem = file[:-3]
            if stem == "__init__":
                if parts:
                    found.append((".".join(parts), os.path.join(folder, file), True))
                continue
            if stem == "__main__" or (not parts and stem in SKIP_TOP):
                continue
            found.append((".".join([*parts, stem]), os.path.join(folder, file), False))
    return sorted(found)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stdlib.bin")
    entries = []
    for name, path, package in modules():
        with open(path, "rb") as handle:
            source = handle.read()
        filename = "/python/" + os.path.relpath(path, ROOT).replace(os.sep, "/")
        code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
        entries.append((name, package, marshal.dumps(code)))
    with open(out + ".tmp", "wb") as handle:
        handle.write(MAGIC)
        handle.write(struct.pack("<I", len(entries)))
        for name, package, code in entries:
            encoded = name.encode()
            handle.write(struct.pack("<H", len(encoded)))
            handle.write(encoded)
            handle.write(struct.pack("<BI", 1 if package else 0, len(code)))
            handle.write(code)
    os.replace(out + ".tmp", out)
    print(f"{len(entries)} modules of {sys.version.split()[0]} compiled into {out}")


main()
