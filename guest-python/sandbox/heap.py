"""Fills the free space of the build snapshot's heap, so that a request's allocations land on
fresh, contiguous pages instead of holes spread over the whole heap.

The guest's CPython has no pymalloc: every object comes from wasi-libc's `malloc` (dlmalloc),
which serves a request from the best-fitting free chunk and extends the top of the heap only
when none fits. At the end of `bake` the heap holds thousands of free chunks, mostly 16 bytes,
left by imports, the warm-up and the immortal walk and spread over its whole length (measured
on examples/hello: 6,900 free chunks, 1.4 MB, over 26 MB). Every instance starts from that
snapshot, so a request's small objects would fill those holes, each in a different page, and
every page a request writes is copied back from the snapshot after it
(`host/src/sandbox/reset.rs`).

`fill()` empties CPython's free lists (a full collection does), then allocates the smallest
object over and over until the allocations come from the top of the heap: dlmalloc hands out
every free chunk (splitting the larger ones) before it touches the top. What it allocated is
kept alive in the snapshot, and the last, contiguous run (which came from the top) is freed
again. A request then allocates from the top, page after page. Measured on `GET /users/42` of
examples/hello (`bench/cpu.sh`): 356 pages restored after each request before, 200 after; a
route's 2,000 new objects spread over 284 pages before, 10 after (`tests/isolation.rs`).

What it costs: the list that holds the objects (4 bytes each) is made whole before the first,
from the top, so the memory image grows by about a megabyte of zeros at its end, which no request
touches unless it needs the room. Nothing a route can observe changes, only which addresses
its objects get.
"""

import gc

# What `fill` allocated: alive in the snapshot, so its chunks are never handed out again. Never
# read; the cycle collector does not visit it (`gc.freeze()`).
_KEPT = []

# How many consecutive allocations, each the same small step above the one before and above
# every address seen before them, show that they come from the top of the heap: 256 KiB of
# the smallest chunk, twice the largest hole measured at the end of a bake (128 KB). A larger
# hole is taken for the top and stays a hole.
TOP_RUN = 16_384

# At most this many allocations (3 MiB of the smallest chunk, twice the holes measured): if the
# top was not found by then, everything is freed again. The list that holds them is made this
# long before the first, so that it is one allocation that never moves (a list that grew
# would leave its old copies behind as holes).
LIMIT = 200_000


def fill():
    """Allocate every free chunk of the heap below its top; return how many objects that took.
    Runs last in `bake`: what is freed after it makes new holes."""
    # A full collection also empties CPython's free lists (of tuples, lists, dicts, ...), whose
    # objects a request would otherwise reuse wherever they lie: they become holes as well.
    gc.collect()
    kept = [None] * LIMIT
    highest = 0
    previous = 0
    step = 0
    run_from = None  # where in `kept` the current run of steps began
    count = 0
    while count < LIMIT:
        block = object()
        address = id(block)
        kept[count] = block
        count += 1
        if run_from is not None and address - previous == step:
            if count - run_from >= TOP_RUN:
                break
        elif previous and address > highest and 0 < address - previous <= 64:
            # Possibly the second allocation from the top: everything before it lies below.
            step = address - previous
            run_from = count - 2
        else:
            run_from = None
        highest = max(highest, address)
        previous = address
    else:
        run_from = 0  # no top found: free it all
    block = None
    # The run came from the top: give it back (it merges into the top again), and the list's
    # unused end with it.
    del kept[run_from:]
    _KEPT.append(kept)
    gc.freeze()
    return run_from
