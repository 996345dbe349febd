//! The instance slots' page tables, filled in before the first request, so that the memory
//! reset (see [`super::reset`]) restores only the pages a request wrote.
//!
//! With `PAGEMAP_SCAN`, wasmtime 50.0.1 restores the pages the kernel reports as written and
//! neither a file page (the snapshot, mapped copy-on-write) nor the zero page. The kernel
//! also reports as written every page that is not mapped at all but lies in a page table that
//! exists (measured on Linux 6.18: write one page of a fresh 2 MiB range and all 512 are
//! reported). A slot whose guest touched one page of a 2 MiB range therefore has the other
//! 511 copied from the snapshot at its first reset, which makes them private copies, which
//! every later scan reports as written again: about 2,000 pages (8 MiB) copied after every
//! request of `examples/hello`, of which about 250 were changed by it.
//!
//! [`populate`] asks the kernel (`MADV_POPULATE_READ`) to map every page of every slot that
//! holds a snapshot, read-only: the snapshot's own pages and the zero page. Reading a page
//! changes nothing a guest can see (an unmapped page of a slot reads as the snapshot's page
//! or zero anyway), so it is safe at any time, on any slot, in use or not; it only changes
//! what the next scan reports: then exactly the pages written since they were mapped.
//! [`super::Sandbox::prepare_slots`] instantiates the guest once in every slot it may use and
//! populates them before requests arrive. A kernel without `MADV_POPULATE_READ` (before 5.14)
//! refuses it, and the reset stays as correct as before, only slower.
//!
//! This module finds and populates slots; it does not decide how they are reset.

use std::ops::Range;

/// The address ranges of the linear-memory slots that hold a snapshot: the copy-on-write
/// mapping of wasmtime's memory image and the read-write anonymous mappings right before and
/// after it (the zero-filled memory below and above the image), from `/proc/self/maps` text.
/// wasmtime maps the image from the compiled guest's file (`*.cwasm`, in the cache folder)
/// where the guest was loaded from one, else from a memfd named `wasm-memory-image`.
pub fn snapshot_slots(maps: &str) -> Vec<Range<usize>> {
    let vmas: Vec<Vma> = maps.lines().filter_map(Vma::parse).collect();
    let mut slots = Vec::new();
    for (i, vma) in vmas.iter().enumerate() {
        if !vma.memory_image() {
            continue;
        }
        let mut start = vma.range.start;
        for before in vmas[..i].iter().rev() {
            if before.range.end != start || !before.anonymous_rw() {
                break;
            }
            start = before.range.start;
        }
        let mut end = vma.range.end;
        for after in &vmas[i + 1..] {
            if after.range.start != end || !after.anonymous_rw() {
                break;
            }
            end = after.range.end;
        }
        slots.push(start..end);
    }
    slots
}

/// Map every page of every snapshot slot of this process read-only (see the module
/// documentation). Returns how many slots were populated; an error names why none could be.
pub fn populate() -> std::io::Result<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut populated = 0;
    for slot in snapshot_slots(&maps) {
        // SAFETY: MADV_POPULATE_READ only faults pages in for reading, as a read of each page
        // would; it neither changes contents nor unmaps anything, and fails (without effect)
        // on a range that is not readable. The range comes from this process's own maps.
        let rc = unsafe {
            libc::madvise(
                slot.start as *mut libc::c_void,
                slot.end - slot.start,
                libc::MADV_POPULATE_READ,
            )
        };
        if rc != 0 {
            let error = std::io::Error::last_os_error();
            // EINVAL: a kernel before 5.14; anything else: a slot that changed under us.
            if error.raw_os_error() == Some(libc::EINVAL) && populated == 0 {
                return Err(error);
            }
            tracing::debug!("populating a sandbox slot {slot:x?}: {error}");
            continue;
        }
        populated += 1;
    }
    Ok(populated)
}

struct Vma<'a> {
    range: Range<usize>,
    perms: &'a str,
    name: &'a str,
}

impl<'a> Vma<'a> {
    /// One line of `/proc/PID/maps`: `start-end perms offset dev inode [name]`.
    fn parse(line: &'a str) -> Option<Self> {
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?;
        let name = fields.nth(3).unwrap_or("").trim();
        Some(Self {
            range: usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?,
            perms,
            name,
        })
    }

    /// A private, writable mapping of a memory image: of a memfd, or of a compiled guest file
    /// (whose own mappings are read-only or executable, never writable).
    fn memory_image(&self) -> bool {
        let name = self.name.trim_end_matches(" (deleted)");
        self.perms == "rw-p" && (name.contains("wasm-memory-image") || name.ends_with(".cwasm"))
    }

    fn anonymous_rw(&self) -> bool {
        self.perms == "rw-p" && self.name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
7f0000000000-7f00000f1000 rw-p 00000000 00:00 0 
7f00000f1000-7f0001350000 rw-p 00000000 00:01 2051                       /memfd:wasm-memory-image (deleted)
7f0001350000-7f0001370000 rw-p 00000000 00:00 0 
7f0001370000-7f0100000000 ---p 00000000 00:00 0 
7f0100000000-7f0100800000 rw-p 00000000 00:01 2051                       /memfd:wasm-memory-image (deleted)
7f0100800000-7f0200000000 ---p 00000000 00:00 0 
7f0200000000-7f0200001000 rw-p 00000000 00:00 0 
7f0200001000-7f0200002000 r--p 00000000 08:01 123                        /usr/lib/libc.so.6
7f0300000000-7f0300010000 r-xp 00001000 08:01 77                         /c/native/ab.cwasm
7f0400000000-7f0400100000 rw-p 00000000 00:00 0 
7f0400100000-7f0401300000 rw-p 0141f000 08:01 77                         /c/native/ab.cwasm
7f0401300000-7f0401320000 rw-p 00000000 00:00 0 
7f0401320000-7f0500000000 ---p 00000000 00:00 0 
7f0500000000-7f0500001000 rw-p 00000000 08:01 9                          /usr/bin/filerouter
";

    #[test]
    fn a_slot_is_the_image_and_the_anonymous_memory_around_it() {
        assert_eq!(
            snapshot_slots(MAPS),
            vec![
                0x7f0000000000..0x7f0001370000,
                0x7f0100000000..0x7f0100800000,
                0x7f0400000000..0x7f0401320000,
            ]
        );
    }

    #[test]
    fn other_mappings_and_garbage_are_not_slots() {
        assert!(snapshot_slots("").is_empty());
        assert!(snapshot_slots("not a maps line\n\n").is_empty());
        assert!(snapshot_slots("7f0200000000-7f0200001000 rw-p 00000000 00:00 0 \n").is_empty());
    }
}
