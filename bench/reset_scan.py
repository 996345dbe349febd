#!/usr/bin/env python3
"""What finding a slot's written pages costs: wasmtime's query against userfaultfd's.

    python3 bench/reset_scan.py [PAGES] [WRITTEN]     # defaults: 5008 207

A file of PAGES pages stands for a slot's memory image. It is mapped privately and populated
read-only, as `host/src/sandbox/slots.rs` does with a slot, and WRITTEN pages spread over it are
written. Then, in this process, on this kernel (Linux 6.7 or later):

1. wasmtime 50's question (`runtime/vm/sys/unix/pagemap.rs`): PAGEMAP_SCAN for pages that are
   written and neither file pages nor the zero page. Every page the request ever wrote stays
   private, so this is also what the reset copies back. Its cost is set by the populated page
   table entries: the kernel looks up each one's page (`vm_normal_page`) to tell file pages
   apart.
2. userfaultfd's asynchronous write-protect mode (UFFD_FEATURE_WP_ASYNC) on the same mapping,
   which a memory pool of the host's own could use (issue 28): a scan that asks only for pages
   written since they were last write-protected, which the kernel answers from the page table
   entries alone. Then a whole cycle: the writes (each one a write-protect fault the kernel
   resolves by itself), then a scan that reports and write-protects them again.

Times are per scan or per cycle, averaged over 200, with Python's own overhead included.
"""

import ctypes
import fcntl
import mmap
import os
import struct
import sys
import tempfile
import time

PAGE = 4096
PAGES = int(sys.argv[1]) if len(sys.argv) > 1 else 5008
WRITTEN_PAGES = int(sys.argv[2]) if len(sys.argv) > 2 else 207
SIZE = PAGES * PAGE
REPS = 200


def iowr(kind, number, size):
    return (3 << 30) | (size << 16) | (kind << 8) | number


PAGEMAP_SCAN = iowr(ord("f"), 16, 96)
UFFDIO_API = iowr(0xAA, 0x3F, 24)
UFFDIO_REGISTER = iowr(0xAA, 0x00, 32)
SYS_USERFAULTFD = 323  # x86-64
UFFD_USER_MODE_ONLY = 1
UFFD_FEATURE_WP_UNPOPULATED = 1 << 13
UFFD_FEATURE_WP_ASYNC = 1 << 15
UFFDIO_REGISTER_MODE_WP = 1 << 1
WRITTEN, FILE, PFNZERO = 2, 4, 32
PM_SCAN_WP_MATCHING, PM_SCAN_CHECK_WPASYNC = 1, 2

image = tempfile.TemporaryFile()
image.write(os.urandom(SIZE))
image.flush()
memory = mmap.mmap(image.fileno(), SIZE, flags=mmap.MAP_PRIVATE)
base = ctypes.addressof((ctypes.c_char * SIZE).from_buffer(memory))
for offset in range(0, SIZE, PAGE):  # populate, read-only
    memory[offset]
pagemap = open("/proc/self/pagemap", "rb")
regions = (ctypes.c_uint64 * (3 * 512))()


def scan(flags, inverted, mask, returned=0):
    """PAGEMAP_SCAN over the whole mapping, resumed until it is all seen: pages found."""
    found, start = 0, base
    while start < base + SIZE:
        arg = bytearray(struct.pack("<12Q", 96, flags, start, base + SIZE, 0,
                                    ctypes.addressof(regions), 512, 0, inverted, mask, 0,
                                    returned))
        count = fcntl.ioctl(pagemap.fileno(), PAGEMAP_SCAN, arg)
        found += sum((regions[3 * k + 1] - regions[3 * k]) // PAGE for k in range(count))
        walk_end = struct.unpack("<12Q", bytes(arg))[4]
        if walk_end <= start:
            break
        start = walk_end
    return found


def write_pages():
    step = max(1, PAGES // WRITTEN_PAGES)
    for i in range(WRITTEN_PAGES):
        at = i * step * PAGE + 8
        memory[at] = (memory[at] + 1) & 255


def per_call(fn):
    start = time.perf_counter_ns()
    for _ in range(REPS):
        result = fn()
    return (time.perf_counter_ns() - start) / REPS / 1000, result


print(f"{PAGES} populated pages, {WRITTEN_PAGES} written")
write_pages()
took, found = per_call(lambda: scan(0, FILE | PFNZERO, WRITTEN | FILE | PFNZERO))
print(f"wasmtime's scan (written, not file, not zero page): {took:.1f} us, {found} pages")

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
uffd = libc.syscall(SYS_USERFAULTFD, os.O_CLOEXEC | os.O_NONBLOCK | UFFD_USER_MODE_ONLY)
if uffd < 0:
    sys.exit(f"userfaultfd: {os.strerror(ctypes.get_errno())}")
fcntl.ioctl(uffd, UFFDIO_API, bytearray(struct.pack(
    "<3Q", 0xAA, UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED, 0)))
fcntl.ioctl(uffd, UFFDIO_REGISTER, bytearray(struct.pack(
    "<4Q", base, SIZE, UFFDIO_REGISTER_MODE_WP, 0)))
protect = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC
scan(protect, 0, WRITTEN, WRITTEN)
write_pages()
took, found = per_call(lambda: scan(0, 0, WRITTEN, WRITTEN))
print(f"userfaultfd write-protect, scan for written only: {took:.1f} us, {found} pages")


def cycle():
    write_pages()
    return scan(protect, 0, WRITTEN, WRITTEN)


took, found = per_call(cycle)
writes, _ = per_call(write_pages)  # the pages are unprotected now: no faults
print(f"userfaultfd cycle (the writes, their faults, scan and protect again): {took:.1f} us, "
      f"of which the writes without faults {writes:.1f} us")
