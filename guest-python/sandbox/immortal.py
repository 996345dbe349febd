"""Which objects of the build snapshot become immortal, so that requests stop writing to them.

CPython writes to an object whenever it takes or drops a reference to it, reads included:
calling a module's function writes the function's reference count, looking a name up writes the
name's. Every instance starts from the build's snapshot, and every memory page a request writes
is copied back from the snapshot after it (`host/src/sandbox/reset.rs`). So a request that only
reads the project's modules still dirties hundreds of pages of reference counts, and those
counts are back where they started when it ends.

An immortal object (PEP 683) has a reference count CPython never changes: incrementing and
decrementing it is skipped, and it is never freed. This is the documented aid for servers
whose processes share a heap copy-on-write after fork (Instagram's, named by the PEP), and it
fits a snapshot the same way. `send()` lists, at the end of `bake`, every object reachable
from the modules (the project's, the framework's, the guest's own and the standard library's,
with everything they hold) that can safely become immortal; the host writes CPython's immortal
reference count into each before it takes the snapshot (`host/src/sandbox/snapshot.rs`), after
checking that the object is still there. Python code cannot write a reference count itself.

What this changes for route code: nothing it can rely on. An object of the snapshot that a
request drops is no longer freed during that request (it could not outlive the request's
instance anyway), and `sys.getrefcount` of such an object reports a large number. Objects
with a finalizer (`__del__`, generators, coroutines) are left mortal, so their finalizers run
as before.

Only objects reachable from the modules are listed: they stay alive after `bake` returns,
while its own locals and temporaries do not (their memory may be reused before the snapshot is
taken, and a reference count written there would corrupt it). Objects only the interpreter's C
state holds are simply not listed.
"""

import array
import gc
import sys
import types

# The end of one level's referents.
_DONE = object()

# Objects with a finalizer that must run when the last reference goes: generator-like objects
# and frames (instances of classes with `__del__` are found by `_has_finalizer`).
_FINALIZED = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType, types.FrameType)


def send(roots, to_host, batch=4096):
    """Send `to_host` (`snapshot.immortal`) the address and type address of every mortal
    object reachable from `roots` (`sys.modules` and the guest's own modules, which
    `importing.hide()` took out of it) that has no finalizer, `batch` numbers at a time. Runs
    the cycle collector first, so nothing sent is garbage waiting to be freed. Returns how many
    objects were sent.

    Frugal on purpose: what this allocates stays in the snapshot's heap as free space (linear
    memory never shrinks, and every page of the snapshot costs each request's reset a look), so
    the visited set is a bitmap (a bit per 8 bytes of memory), the walk holds only the current
    path's referent lists, and the answer leaves in small batches."""
    gc.collect()
    seen = bytearray()
    pending = array.array("I")
    sent = 0
    # Whether a type's objects have a finalizer, by the type's address (a project's metaclass
    # may define `__hash__`): looking it up walks the type's bases, and the walk meets a few
    # thousand types in a few hundred thousand objects (this halves the walk's time).
    finalizes = {}
    # Depth first, one iterator per level.
    path = [iter(roots)]
    while path:
        obj = next(path[-1], _DONE)
        if obj is _DONE:
            path.pop()
            continue
        address = id(obj)
        slot = address >> 3  # objects are 8-byte aligned and at least 8 bytes long
        byte, bit = slot >> 3, 1 << (slot & 7)
        if byte >= len(seen):
            seen.extend(bytes(byte - len(seen) + 65536))
        if seen[byte] & bit:
            continue
        seen[byte] |= bit
        kind = type(obj)
        path.append(iter(gc.get_referents(obj)))
        if kind is types.CodeType:
            # A code object's constants and names are not visible to the collector.
            path.append(iter((*obj.co_consts, *obj.co_names, *obj.co_varnames)))
        finalizer = finalizes.get(id(kind))
        if finalizer is None:
            finalizer = finalizes[id(kind)] = _has_finalizer(kind)
        if finalizer or sys._is_immortal(obj):
            continue
        pending.append(address)
        pending.append(id(kind))
        if len(pending) >= batch:
            to_host(pending.tolist())
            sent += len(pending) // 2
            del pending[:]
    to_host(pending.tolist())
    sent += len(pending) // 2
    # The snapshot's objects are never visited by the cycle collector again (immortal ones
    # would be moved out of its generations on its first visit anyway).
    gc.freeze()
    return sent


def _has_finalizer(kind):
    """Whether objects of `kind` have a finalizer, looked up in the class dictionaries only:
    no attribute hook of a project's metaclass runs, and a class that cannot be looked into
    counts as having one (its objects stay mortal)."""
    if issubclass(kind, _FINALIZED):
        return True
    try:
        bases = type.__getattribute__(kind, "__mro__")
        return any("__del__" in type.__getattribute__(base, "__dict__") for base in bases)
    except Exception:  # noqa: BLE001
        return True
