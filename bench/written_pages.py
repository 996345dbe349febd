#!/usr/bin/env python3
"""The pages of a filerouter server's sandbox memory slots that are private to a slot (written
since it was mapped from the memory image): what the memory reset copies back after a request.
The largest over all slots is printed. Used by bench/cpu.sh and bench/pydantic.sh.

    bench/written_pages.py PID [ours|scan|copy]

"ours" (the default; filerouter's own slots since issue 28) counts pages present or swapped, as
sandbox/reset.rs asks; "scan" counts any page so reported (wasmtime's pooling allocator before);
"copy" is what a reset without PAGEMAP_SCAN copies (the first 32 MiB of the slot).
"mapped" counts instead the pages of the slot's image mapping that are mapped at all (present:
read or written), which the reset's scan looks at after every request.
"""
import ctypes, fcntl, re, struct, sys
pid = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "ours"
vmas = []
for line in open(f"/proc/{pid}/maps"):
    m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)", line)
    vmas.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4)))
pagemap = open(f"/proc/{pid}/pagemap", "rb")
PAGEMAP_SCAN = (3 << 30) | (96 << 16) | (ord("f") << 8) | 16
WRITTEN, FILE, PRESENT, SWAPPED, PFNZERO = 2, 4, 8, 16, 32
# "ours" (filerouter's own slots since issue 28): only pages present or swapped, as
# sandbox/reset.rs asks; "scan" (wasmtime's pooling allocator before): any page so reported
ANYOF = PRESENT | SWAPPED if mode == "ours" else 0
def written(lo, hi):
    # written, and neither a file (image) page nor the zero page
    vec = (ctypes.c_uint64 * (3 * 512))()
    pages, start = 0, lo
    while start < hi:
        arg = bytearray(struct.pack("<12Q", 96, 0, start, hi, 0, ctypes.addressof(vec), 512, 0,
                                    FILE | PFNZERO, WRITTEN | FILE | PFNZERO, ANYOF, 0))
        n = fcntl.ioctl(pagemap.fileno(), PAGEMAP_SCAN, arg)
        pages += sum((vec[3 * k + 1] - vec[3 * k]) // 4096 for k in range(n))
        walk_end = struct.unpack("<12Q", bytes(arg))[4]
        if walk_end <= start:
            break
        start = walk_end
    return pages
best = 0
for i, (a, b, perms, name) in enumerate(vmas):
    # the slot's copy-on-write mapping of the memory image: of filerouter's image file
    # (images/*.img), or (builds before issue 28) of the compiled guest's file or a memfd
    image = name.replace(" (deleted)", "")
    ours = image.endswith(".img")
    if perms != "rw-p" or not ("wasm-memory-image" in image or image.endswith(".cwasm") or ours):
        continue
    lo, hi = a, b
    j = i - 1
    while j >= 0 and vmas[j][1] == lo and vmas[j][2] == "rw-p" and not vmas[j][3]:
        lo = vmas[j][0]; j -= 1
    j = i + 1
    while j < len(vmas) and vmas[j][0] == hi and vmas[j][2] == "rw-p" and not vmas[j][3]:
        hi = vmas[j][1]; j += 1
    if mode == "mapped":
        # bit 63 of a pagemap entry: present
        pagemap.seek(a // 4096 * 8)
        entries = struct.unpack(f"<{(b - a) // 4096}Q", pagemap.read((b - a) // 4096 * 8))
        best = max(best, sum(1 for e in entries if e >> 63))
        continue
    if mode == "copy":
        # without PAGEMAP_SCAN the reset copies the first 32 MiB of the slot, written or not
        best = max(best, min(hi - lo, 32 << 20) // 4096)
    else:
        best = max(best, written(lo, hi))
print(best)
