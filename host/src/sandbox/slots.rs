//! Memory slots: the linear memories of guest instances, ours rather than wasmtime's, each mapped
//! copy-on-write from its project's memory image ([`super::image`]) and reset after every call
//! by what the call wrote ([`super::reset`]).
//!
//! One compiled guest serves every project of the process; what differs is the memory an
//! instance starts with. wasmtime asks the engine's [`MemoryCreator`] ([`Slots`]) for each new
//! memory without saying which store it is for, so the store's memory limiter announces its
//! project's image ([`announce`]) when wasmtime asks it to grant the new memory, which wasmtime
//! does just before it creates the memory, on the same thread (wasmtime 50; not a documented
//! promise, so `tests::wasmtime_asks_the_limiter_just_before_it_creates_the_memory` fails
//! loudly if an upgrade changes it, and a memory created without an announcement is refused).
//!
//! A slot is a reservation of the engine's size (4 GiB and guard pages) of which the image's
//! pages are mapped privately from its file and the rest is inaccessible until the guest
//! grows its memory. After a call the slot goes back to a free list, still mapping its image,
//! so the next call of the same project finds its pages in place (slots are affine to their
//! project); a call of another project gets a new slot while there are fewer than `capacity`,
//! else takes the least recently used free slot and maps its own image over it (two `mmap`
//! calls). Slots past `capacity` (made while every slot was in use) are unmapped when their
//! call ends.
//!
//! Fiber stacks are pooled here too ([`Stacks`]): on-demand instances would otherwise map and
//! unmap a stack per call.
//!
//! Not here: which pages a reset restores (`reset`), making images (`image`), the engine.

use std::{
    cell::RefCell,
    ops::Range,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use wasmtime::{LinearMemory, MemoryCreator, MemoryType, StackCreator, StackMemory};

use super::{image::Image, reset};

/// `MADV_POPULATE_WRITE` (`asm-generic/mman-common.h`, Linux 5.14), which libc 0.2 does not
/// name; an older kernel refuses it (EINVAL) and nothing happens.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// An announced memory: the image it starts from, and who watches it.
type Announcement = (Arc<Image>, Option<Arc<MemoryWatch>>);

thread_local! {
    /// The memory the next one created on this thread is: set by [`announce`], taken by
    /// [`Slots::new_memory`].
    static ANNOUNCED: RefCell<Option<Announcement>> = const { RefCell::new(None) };
}

/// Say which image the memory wasmtime is about to create on this thread starts from, and
/// whether `watch` should see it (a live snapshot's instance). Called by the store's memory
/// limiter when asked to grant a new memory.
pub fn announce(image: &Arc<Image>, watch: Option<&Arc<MemoryWatch>>) {
    ANNOUNCED.with(|next| *next.borrow_mut() = Some((image.clone(), watch.cloned())));
}

/// Where one instance's memory is and how long it is now, for copying it out when its call
/// has returned: `dev` snapshots a live instance's memory so ([`super::live_snapshot`]).
/// Empty until the memory is made, and again once it is dropped.
#[derive(Debug, Default)]
pub struct MemoryWatch {
    base: AtomicUsize,
    size: AtomicUsize,
}

impl MemoryWatch {
    /// A copy of the watched memory's bytes, or `None` if it was never made or is gone.
    ///
    /// Call it only while the store that owns the memory is alive and runs no guest code
    /// (between calls of its instance): the memory then neither moves nor changes. The slot's
    /// memory lives at a fixed address for its whole life and its first `size` bytes are
    /// accessible; its drop empties the watch before the slot goes back to the free list.
    pub fn copy(&self) -> Option<Vec<u8>> {
        let base = self.base.load(Ordering::SeqCst);
        let size = self.size.load(Ordering::SeqCst);
        if base == 0 {
            return None;
        }
        // SAFETY: `base..base + size` is the live memory's accessible part (see above), and
        // nothing writes to it while its store runs no guest code.
        let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, size) };
        Some(bytes.to_vec())
    }

    fn set(&self, base: usize, size: usize) {
        self.size.store(size, Ordering::SeqCst);
        self.base.store(base, Ordering::SeqCst);
    }
}

/// Forget an announcement no memory took (after an instantiation, whatever happened).
pub fn clear_announcement() {
    ANNOUNCED.with(|next| next.borrow_mut().take());
}

/// Counts of what the slots did, for tests and the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SlotCounts {
    /// Slots mapped (reservations made).
    pub created: u64,
    /// Memories given out from a free slot that already held their image.
    pub warm: u64,
    /// Memories given out from a free slot that held another image.
    pub switched: u64,
    /// Of those, the slots that held a layer of the same base, and so mapped only the pages
    /// where the two images may differ (`Slot::switch_to`).
    pub switched_within_base: u64,
    /// Resets that copied written pages back.
    pub copied: u64,
    /// Resets that mapped the image afresh.
    pub remapped: u64,
    /// Pages copied back, all resets together.
    pub pages_copied: u64,
}

/// The engine's memories: a free list of slots, and counts.
pub struct Slots {
    inner: Arc<SlotsInner>,
}

struct SlotsInner {
    /// Slots no instance uses, the least recently used first.
    free: Mutex<Vec<Slot>>,
    /// The most slots kept, in use or free.
    capacity: usize,
    /// Slots that exist, in use or free.
    total: AtomicUsize,
    policy: reset::ResetPolicy,
    created: AtomicU64,
    warm: AtomicU64,
    switched: AtomicU64,
    switched_within_base: AtomicU64,
    copied: AtomicU64,
    remapped: AtomicU64,
    pages_copied: AtomicU64,
}

/// One reservation: `guard` inaccessible bytes, then the memory (`reserved` bytes, the first
/// `accessible` of them readable and writable), then `guard` more.
struct Slot {
    /// The memory's first byte.
    base: usize,
    reserved: usize,
    guard: usize,
    accessible: usize,
    /// The image mapped at `base`.
    image: Arc<Image>,
    /// The pages the last call wrote (offsets from `base`), as the last reset found them:
    /// where the next project's call, laid out alike, will most likely write too.
    written: Vec<Range<usize>>,
}

impl Slots {
    /// Slots for an engine that runs at most `capacity` instances at once.
    pub fn new(capacity: usize, policy: reset::ResetPolicy) -> Self {
        Self {
            inner: Arc::new(SlotsInner {
                free: Mutex::new(Vec::new()),
                capacity: capacity.max(1),
                total: AtomicUsize::new(0),
                policy,
                created: AtomicU64::new(0),
                warm: AtomicU64::new(0),
                switched: AtomicU64::new(0),
                switched_within_base: AtomicU64::new(0),
                copied: AtomicU64::new(0),
                remapped: AtomicU64::new(0),
                pages_copied: AtomicU64::new(0),
            }),
        }
    }

    /// Another handle on the same slots (one goes to wasmtime).
    pub fn handle(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }

    /// Unmap the free slots whose image nothing else holds any more (a `dev` snapshot that was
    /// replaced): a free slot keeps its image mapped for the next call of its project, which
    /// for a replaced image never comes. Returns how many were unmapped.
    pub fn forget_unused_images(&self) -> usize {
        let Ok(mut free) = self.inner.free.lock() else {
            return 0;
        };
        let before = free.len();
        // A slot's own handle is one; another holder (a sandbox, a slot in use) makes two.
        free.retain(|slot| Arc::strong_count(&slot.image) > 1);
        let unmapped = before - free.len();
        self.inner.total.fetch_sub(unmapped, Ordering::Relaxed);
        unmapped
    }

    /// What the slots did so far.
    pub fn counts(&self) -> SlotCounts {
        let inner = &self.inner;
        SlotCounts {
            created: inner.created.load(Ordering::Relaxed),
            warm: inner.warm.load(Ordering::Relaxed),
            switched: inner.switched.load(Ordering::Relaxed),
            switched_within_base: inner.switched_within_base.load(Ordering::Relaxed),
            copied: inner.copied.load(Ordering::Relaxed),
            remapped: inner.remapped.load(Ordering::Relaxed),
            pages_copied: inner.pages_copied.load(Ordering::Relaxed),
        }
    }
}

/// What failed in a system call, with its name.
fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

impl SlotsInner {
    /// A slot holding `image`, of `reserved` bytes and `guard` around: a free one that holds it
    /// already (the most recently used), else the most recently used free one that holds a
    /// layer of the same base (switching costs a few pages, and the slots in use stay few, so
    /// their pages stay in the processor's caches), else a new one while there are fewer than
    /// `capacity`, else the least recently used free one, switched to `image`, else (every slot
    /// in use) a new one.
    fn take(&self, image: &Arc<Image>, reserved: usize, guard: usize) -> Result<Slot, String> {
        let (same, other) = {
            let mut free = self.free.lock().map_err(|_| "the slot list is poisoned")?;
            let before = free.len();
            free.retain(|slot| slot.reserved == reserved && slot.guard == guard);
            self.total.fetch_sub(before - free.len(), Ordering::Relaxed);
            let full = self.total.load(Ordering::Relaxed) >= self.capacity;
            let warm = free
                .iter()
                .rposition(|slot| Arc::ptr_eq(&slot.image, image));
            // Looked for only when no slot holds the image itself.
            let kin = warm
                .is_none()
                .then(|| free.iter().rposition(|slot| slot.image.shares_base(image)))
                .flatten();
            match (warm, kin) {
                (Some(at), _) => (Some(free.remove(at)), None),
                (None, Some(at)) => (None, Some(free.remove(at))),
                (None, None) if full && !free.is_empty() => (None, Some(free.remove(0))),
                (None, None) => (None, None),
            }
        };
        if let Some(slot) = same {
            self.warm.fetch_add(1, Ordering::Relaxed);
            return Ok(slot);
        }
        if let Some(mut slot) = other {
            match slot.switch_to(image) {
                Ok(within_base) => {
                    self.switched.fetch_add(1, Ordering::Relaxed);
                    if within_base {
                        self.switched_within_base.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    self.total.fetch_sub(1, Ordering::Relaxed);
                    return Err(e);
                }
            }
            return Ok(slot);
        }
        let slot = Slot::new(image, reserved, guard)?;
        self.total.fetch_add(1, Ordering::Relaxed);
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(slot)
    }

    /// Reset `slot` and put it on the free list; a slot past `capacity`, or one that cannot be
    /// reset, is unmapped.
    fn give_back(&self, mut slot: Slot) {
        slot.image.served();
        let total = self.total.load(Ordering::Relaxed);
        if total > self.capacity {
            self.total.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        match slot.reset(self.policy.scans()) {
            Ok(Some(pages)) => {
                self.copied.fetch_add(1, Ordering::Relaxed);
                self.pages_copied.fetch_add(pages as u64, Ordering::Relaxed);
            }
            Ok(None) => {
                self.remapped.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!("a sandbox memory slot could not be reset ({e}); unmapped");
                self.total.fetch_sub(1, Ordering::Relaxed);
                return;
            }
        }
        match self.free.lock() {
            Ok(mut free) => free.push(slot),
            Err(_) => {
                self.total.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Slot {
    fn new(image: &Arc<Image>, reserved: usize, guard: usize) -> Result<Self, String> {
        if image.size() > reserved {
            return Err(format!(
                "the memory image ({} bytes) is larger than a memory may be",
                image.size()
            ));
        }
        let total = reserved
            .checked_add(2 * guard)
            .ok_or("the memory reservation overflows")?;
        // SAFETY: a fresh private anonymous reservation, nothing else mapped there.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(os_error("reserve a memory slot"));
        }
        let mut slot = Self {
            base: start as usize + guard,
            reserved,
            guard,
            accessible: 0,
            image: image.clone(),
            written: Vec::new(),
        };
        image.held(true);
        slot.map_image()?;
        Ok(slot)
    }

    /// Map the slot's image over its first pages, private and writable: every page reads as the
    /// image's until written. Whatever was mapped there before is gone. Read faults map only
    /// pages of the image's page cache, which holds the pages requests read (`image`).
    fn map_image(&mut self) -> Result<(), String> {
        // SAFETY: the range lies within this slot's own reservation, which no instance uses
        // while the slot is being mapped (it is off the free list and not yet given out, or
        // being reset after its instance was dropped).
        unsafe { self.image.map_private(self.base, 0..self.image.size()) }?;
        // No readahead: a page of the image that is not in the page cache is read alone, in a
        // small folio, so that later faults map only pages requests read (see `image`'s module
        // documentation). Advice only; without it the slot is as correct.
        // SAFETY: the mapping just made, within this slot's reservation.
        unsafe {
            libc::madvise(
                self.base as *mut libc::c_void,
                self.image.size(),
                libc::MADV_RANDOM,
            )
        };
        self.accessible = self.accessible.max(self.image.size());
        Ok(())
    }

    /// Make `range` (within the reservation) inaccessible and empty again: fresh anonymous
    /// pages, no access, nothing resident.
    fn drop_pages(&self, range: Range<usize>) -> Result<(), String> {
        if range.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `map_image`: this slot's own reservation, unused meanwhile.
        let mapped = unsafe {
            libc::mmap(
                range.start as *mut libc::c_void,
                range.end - range.start,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(os_error("empty a memory slot"));
        }
        Ok(())
    }

    /// Hand the slot to another project. When both projects' images are layers of one base
    /// (`layer`), only the pages where either differs from the base are written: the new
    /// image's bytes are copied into them (made private first, in one `MADV_POPULATE_WRITE`),
    /// and the rest of the slot, the pages its last call wrote included (the reset copied the
    /// old image's bytes back, the base's there), reads as the new image already. No mapping
    /// changes, so no other processor's TLB is flushed; the copies stay private, and later
    /// switches of the slot only copy. Otherwise drop
    /// everything, map `image`, and make private copies at once of the pages the last call
    /// wrote (`MADV_POPULATE_WRITE`, Linux 5.14): every project's interpreter is laid out
    /// alike, so the new project's call will write most of the same pages, and one system call
    /// copies them instead of a page fault each (faults are costly on virtual machines). What
    /// the guest reads is the image either way.
    fn switch_to(&mut self, image: &Arc<Image>) -> Result<bool, String> {
        if self.accessible == self.image.size()
            && let Some(differing) = self.image.differing(image)
        {
            for range in differing {
                // SAFETY: within the slot's image pages, private and writable, used by no
                // instance meanwhile; populating copies each page's own contents first.
                unsafe {
                    libc::madvise(
                        (self.base + range.start) as *mut libc::c_void,
                        range.len(),
                        MADV_POPULATE_WRITE,
                    );
                    image.copy_into(self.base, range);
                }
            }
            self.image.held(false);
            image.held(true);
            self.image = image.clone();
            return Ok(true);
        }
        self.drop_pages(self.base..self.base + self.accessible)?;
        self.accessible = 0;
        self.image.held(false);
        image.held(true);
        self.image = image.clone();
        self.map_image()?;
        for region in &self.written {
            let end = region.end.min(self.image.size());
            if region.start >= end {
                continue;
            }
            // SAFETY: within the image pages just mapped, private and writable; populating
            // copies each page's own contents, which changes nothing the guest can read.
            unsafe {
                libc::madvise(
                    (self.base + region.start) as *mut libc::c_void,
                    end - region.start,
                    MADV_POPULATE_WRITE,
                )
            };
        }
        Ok(false)
    }

    /// Make the memory `size` bytes long (never shorter than the image).
    fn grow_to(&mut self, size: usize) -> Result<(), String> {
        if size <= self.accessible {
            return Ok(());
        }
        if size > self.reserved {
            return Err(format!("{size} bytes is past the slot's reservation"));
        }
        // SAFETY: pages of this slot's reservation beyond what is accessible: anonymous and
        // empty (`drop_pages` or the reservation itself), so they read as zero.
        let rc = unsafe {
            libc::mprotect(
                (self.base + self.accessible) as *mut libc::c_void,
                size - self.accessible,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(os_error("grow a memory slot"));
        }
        self.accessible = size;
        Ok(())
    }

    /// Put the slot back to a fresh copy of its image: memory grown past the image dropped,
    /// and written pages copied back (`scan`, when they are few enough: returns how many) or
    /// the image mapped afresh (returns None).
    fn reset(&mut self, scan: bool) -> Result<Option<usize>, String> {
        let image_end = self.base + self.image.size();
        self.drop_pages(image_end..self.base + self.accessible)?;
        self.accessible = self.image.size();
        if scan && let Some(pagemap) = reset::pagemap() {
            match reset::written_pages(pagemap, self.base..image_end) {
                Ok(mut regions) => {
                    let bytes: usize = regions.iter().map(|r| r.end - r.start).sum();
                    if bytes <= reset::KEEP_RESIDENT {
                        for region in &mut regions {
                            *region = region.start - self.base..region.end - self.base;
                        }
                        for region in &regions {
                            // SAFETY: `region` is within the slot's image pages (the scan's
                            // range), writable, and used by no instance.
                            unsafe { self.image.copy_into(self.base, region.clone()) };
                        }
                        self.written = regions;
                        return Ok(Some(bytes / 4096));
                    }
                }
                Err(e) => tracing::debug!("PAGEMAP_SCAN failed ({e}); mapping the image afresh"),
            }
        }
        self.written.clear();
        self.map_image()?;
        Ok(None)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.image.held(false);
        // SAFETY: the slot's whole reservation, guards included, unmapped once when the slot
        // goes; no instance uses a slot that is being dropped.
        unsafe {
            libc::munmap(
                (self.base - self.guard) as *mut libc::c_void,
                self.reserved + 2 * self.guard,
            );
        }
    }
}

/// A memory in use by one instance: its slot, the size the guest sees, and who watches it.
struct SlotMemory {
    slots: Arc<SlotsInner>,
    slot: Option<Slot>,
    size: usize,
    maximum: Option<usize>,
    watch: Option<Arc<MemoryWatch>>,
}

// SAFETY: a slot is plain memory owned by this value; wasmtime gives it to one store.
unsafe impl LinearMemory for SlotMemory {
    fn byte_size(&self) -> usize {
        self.size
    }

    fn byte_capacity(&self) -> usize {
        self.slot.as_ref().map_or(0, |slot| slot.reserved)
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        if self.maximum.is_some_and(|max| new_size > max) {
            wasmtime::bail!("{new_size} bytes is past the memory's maximum");
        }
        let Some(slot) = self.slot.as_mut() else {
            wasmtime::bail!("the memory has no slot");
        };
        slot.grow_to(new_size).map_err(wasmtime::Error::msg)?;
        self.size = self.size.max(new_size);
        if let Some(watch) = &self.watch {
            watch.set(slot.base, self.size);
        }
        Ok(())
    }

    fn as_ptr(&self) -> *mut u8 {
        self.slot
            .as_ref()
            .map_or(std::ptr::null_mut(), |slot| slot.base as *mut u8)
    }
}

impl Drop for SlotMemory {
    fn drop(&mut self) {
        if let Some(watch) = &self.watch {
            watch.set(0, 0);
        }
        if let Some(slot) = self.slot.take() {
            self.slots.give_back(slot);
        }
    }
}

// SAFETY: every memory returned is a reservation of `reserved` bytes plus `guard` on either
// side, at a fixed address for its whole life, its first `byte_size` bytes accessible, the rest
// inaccessible; it holds the announced image's bytes and zeros after them, as a fresh memory
// with that image's data would.
unsafe impl MemoryCreator for Slots {
    fn new_memory(
        &self,
        ty: MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved_size_in_bytes: Option<usize>,
        guard_size_in_bytes: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        let (image, watch) = ANNOUNCED
            .with(|next| next.borrow_mut().take())
            .ok_or("no memory image was announced for this instance (a filerouter bug)")?;
        if ty.is_shared() || ty.is_64() {
            return Err("only a plain 32-bit memory can come from an image".into());
        }
        let reserved = reserved_size_in_bytes.ok_or("the engine gives no memory reservation")?;
        let mut slot = self.inner.take(&image, reserved, guard_size_in_bytes)?;
        let size = image.size().max(minimum);
        if let Err(e) = slot.grow_to(size) {
            self.inner.give_back(slot);
            return Err(e);
        }
        if let Some(watch) = &watch {
            watch.set(slot.base, size);
        }
        Ok(Box::new(SlotMemory {
            slots: self.inner.clone(),
            slot: Some(slot),
            size,
            maximum,
            watch,
        }))
    }
}

/// Fiber stacks kept for reuse: at most `capacity` wait, each with a guard page below.
pub struct Stacks {
    inner: Arc<StacksInner>,
}

struct StacksInner {
    free: Mutex<Vec<(usize, usize)>>,
    capacity: usize,
}

const STACK_GUARD: usize = 4096;

/// How much of a pooled stack's top may stay resident between calls: what ordinary calls
/// touch. A deep call (a recursion down to the 32 MiB limit) touches far more, which is given
/// back when its stack returns to the pool, so that the pool never holds a deep call's pages.
const STACK_KEPT_RESIDENT: usize = 1 << 20;

impl Stacks {
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(StacksInner {
                free: Mutex::new(Vec::new()),
                capacity: capacity.max(1),
            }),
        }
    }
}

struct PooledStack {
    stacks: Arc<StacksInner>,
    /// The guard page's address; the stack is above it.
    start: usize,
    /// Guard and stack.
    len: usize,
}

// SAFETY: each stack is a private mapping of `len` bytes whose first page is inaccessible (the
// guard) and the rest readable and writable, used by one fiber at a time.
unsafe impl StackCreator for Stacks {
    fn new_stack(&self, size: usize, zeroed: bool) -> wasmtime::Result<Box<dyn StackMemory>> {
        let len = size.next_multiple_of(STACK_GUARD) + STACK_GUARD;
        let reused = {
            let mut free = self
                .inner
                .free
                .lock()
                .map_err(|_| wasmtime::Error::msg("the stack list is poisoned"))?;
            free.iter()
                .position(|(_, l)| *l == len)
                .map(|at| free.swap_remove(at))
        };
        let start = match reused {
            Some((start, _)) => {
                if zeroed {
                    // SAFETY: the stack's own pages above the guard, used by no fiber now.
                    unsafe {
                        std::ptr::write_bytes(
                            (start + STACK_GUARD) as *mut u8,
                            0,
                            len - STACK_GUARD,
                        )
                    };
                }
                start
            }
            None => {
                // SAFETY: a fresh private anonymous mapping; its first page becomes the guard.
                let start = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                if start == libc::MAP_FAILED {
                    wasmtime::bail!("{}", os_error("map a fiber stack"));
                }
                // SAFETY: the first page of the mapping just made.
                if unsafe { libc::mprotect(start, STACK_GUARD, libc::PROT_NONE) } != 0 {
                    let error = os_error("protect a fiber stack's guard page");
                    // SAFETY: the mapping just made, used by nothing.
                    unsafe { libc::munmap(start, len) };
                    wasmtime::bail!("{error}");
                }
                start as usize
            }
        };
        Ok(Box::new(PooledStack {
            stacks: self.inner.clone(),
            start,
            len,
        }))
    }
}

// SAFETY: see `new_stack`: the range above the guard is the stack, the guard below it.
unsafe impl StackMemory for PooledStack {
    fn top(&self) -> *mut u8 {
        (self.start + self.len) as *mut u8
    }

    fn range(&self) -> Range<usize> {
        self.start + STACK_GUARD..self.start + self.len
    }

    fn guard_range(&self) -> Range<*mut u8> {
        self.start as *mut u8..(self.start + STACK_GUARD) as *mut u8
    }
}

impl Drop for PooledStack {
    fn drop(&mut self) {
        if let Ok(mut free) = self.stacks.free.lock()
            && free.len() < self.stacks.capacity
        {
            // The stack grows down from its top: below the part ordinary calls use, give
            // back whatever a deep call touched (pages never touched cost nothing here).
            let below = self.start + STACK_GUARD;
            let kept_from = (self.start + self.len).saturating_sub(STACK_KEPT_RESIDENT);
            if kept_from > below {
                // SAFETY: this stack's own pages, used by no fiber once dropped; reading them
                // after MADV_DONTNEED gives zeros, which a fresh stack holds too.
                unsafe {
                    libc::madvise(
                        below as *mut libc::c_void,
                        kept_from - below,
                        libc::MADV_DONTNEED,
                    )
                };
            }
            free.push((self.start, self.len));
            return;
        }
        // SAFETY: this stack's own mapping, used by no fiber once dropped.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::sandbox::reset::{PagemapScan, ResetPolicy};

    const PAGE: usize = crate::sandbox::image::WASM_PAGE;
    const RESERVED: usize = 256 << 20;
    const GUARD: usize = 1 << 20;

    /// A deterministic stream of numbers (xorshift).
    struct Numbers(u64);

    impl Numbers {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// An image of `pages` wasm pages of bytes from `seed`, written to `dir`.
    fn image(dir: &Path, pages: usize, seed: u64) -> Arc<Image> {
        let mut numbers = Numbers(seed);
        let bytes: Vec<u8> = (0..pages * PAGE).map(|_| numbers.next() as u8).collect();
        let hash = blake3::hash(&bytes);
        Image::load(dir, &hash, || Ok(bytes)).unwrap()
    }

    fn policy(scan: bool) -> ResetPolicy {
        ResetPolicy {
            wanted: if scan {
                PagemapScan::Auto
            } else {
                PagemapScan::Off
            },
            available: crate::sandbox::reset::pagemap_scan_available(),
        }
    }

    fn memory_for(slots: &Slots, image: &Arc<Image>) -> Box<dyn LinearMemory> {
        announce(image, None);
        slots
            .new_memory(MemoryType::new(0, None), 0, None, Some(RESERVED), GUARD)
            .unwrap()
    }

    fn bytes(memory: &dyn LinearMemory, len: usize) -> &[u8] {
        // SAFETY: the test reads within the memory's accessible size.
        unsafe { std::slice::from_raw_parts(memory.as_ptr(), len) }
    }

    /// A free slot keeps its image mapped for the next call of its project; once nothing else
    /// holds the image (a replaced `dev` snapshot), `forget_unused_images` unmaps the slot and
    /// the image goes, while a slot of an image still in use stays. The watch of a live
    /// snapshot sees the memory while it lives, and nothing once it is gone.
    #[test]
    fn slots_of_replaced_images_are_let_go_and_a_watch_sees_only_a_live_memory() {
        let dir = tempfile::tempdir().unwrap();
        let kept = image(dir.path(), 4, 7);
        let replaced = image(dir.path(), 4, 8);
        let slots = Slots::new(4, policy(false));
        let watch = Arc::new(MemoryWatch::default());
        announce(&replaced, Some(&watch));
        let watched = slots
            .new_memory(MemoryType::new(0, None), 0, None, Some(RESERVED), GUARD)
            .unwrap();
        assert_eq!(watch.copy().as_deref(), Some(replaced.bytes()));
        drop(watched);
        assert_eq!(watch.copy(), None, "the watch outlived its memory");
        drop(memory_for(&slots, &kept));
        let gone = Arc::downgrade(&replaced);
        drop(replaced);
        assert!(
            gone.upgrade().is_some(),
            "the free slot should still hold it"
        );
        assert_eq!(slots.forget_unused_images(), 1);
        assert!(
            gone.upgrade().is_none(),
            "the replaced image is still mapped"
        );
        assert_eq!(slots.forget_unused_images(), 0);
        // The kept image's slot is still there, warm.
        let before = slots.counts().warm;
        drop(memory_for(&slots, &kept));
        assert_eq!(slots.counts().warm, before + 1);
    }

    /// Three "tenants" take turns on two slots, thousands of times: each memory given out must
    /// hold exactly its image and zeros past it, whatever the tenant before it on that slot
    /// wrote (its image's pages, pages it grew, a grown region left longer than the next
    /// image), with either reset.
    fn tenants_take_turns(scan: bool) -> SlotCounts {
        let dir = tempfile::tempdir().unwrap();
        let images = [
            image(dir.path(), 24, 1),
            image(dir.path(), 9, 2),
            image(dir.path(), 40, 3),
        ];
        take_turns(scan, &images)
    }

    /// Memories of `images` given out from two slots, thousands of times (see
    /// [`tenants_take_turns`]).
    fn take_turns(scan: bool, images: &[Arc<Image>]) -> SlotCounts {
        let slots = Slots::new(2, policy(scan));
        let mut numbers = Numbers(0x5eed);
        let mut live: Vec<Box<dyn LinearMemory>> = Vec::new();
        for turn in 0..3_000 {
            let image = &images[numbers.below(images.len())];
            let mut memory = memory_for(&slots, image);
            assert_eq!(memory.byte_size(), image.size());
            assert!(
                bytes(&*memory, image.size()) == image.bytes(),
                "turn {turn}: the memory is not its image"
            );
            // Grow, and the new pages are zero.
            let grown = image.size() + (1 + numbers.below(20)) * PAGE;
            memory.grow_to(grown).unwrap();
            assert!(
                bytes(&*memory, grown)[image.size()..]
                    .iter()
                    .all(|b| *b == 0),
                "turn {turn}: grown memory is not zero"
            );
            // Leave markers: in some of the image's pages and in the grown ones.
            let base = memory.as_ptr();
            for _ in 0..numbers.below(64) {
                let at = numbers.below(grown);
                // SAFETY: within the memory's accessible size.
                unsafe { base.add(at).write(0xA5) };
            }
            // Sometimes two memories at once, so that both slots serve every tenant.
            if numbers.below(4) == 0 {
                live.push(memory);
            } else {
                drop(memory);
                live.clear();
            }
        }
        drop(live);
        slots.counts()
    }

    #[test]
    fn tenants_taking_turns_on_few_slots_never_see_each_other_with_the_scan() {
        let counts = tenants_take_turns(true);
        assert!(counts.switched > 100 && counts.warm > 100, "{counts:?}");
        assert!(counts.created < counts.warm, "{counts:?}");
        if crate::sandbox::reset::pagemap_scan_available() {
            assert!(counts.copied > 1_000, "{counts:?}");
        }
    }

    /// Images kept as layers over one base (`layer`), the base itself, and an image of
    /// another size: a slot switching between layers of the base maps only the pages where they
    /// differ, and every memory still holds exactly its image, with either reset.
    #[test]
    fn layers_of_one_base_taking_turns_never_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let base = image(dir.path(), 24, 1);
        let mut numbers = Numbers(0x1a7e);
        let mut images = vec![base.clone()];
        for mark in 1..=4u8 {
            let mut bytes = base.bytes().to_vec();
            for _ in 0..1 + numbers.below(40) {
                let page = numbers.below(bytes.len() / 4096);
                bytes[page * 4096..(page + 1) * 4096].fill(mark);
            }
            let hash = blake3::hash(&bytes);
            let layered = Image::load(dir.path(), &hash, || Ok(bytes)).unwrap();
            assert!(
                layered.differing(&base).is_some(),
                "{layered:?} is not a layer over {base:?}"
            );
            images.push(layered);
        }
        images.push(image(dir.path(), 9, 2));
        for scan in [true, false] {
            let counts = take_turns(scan, &images);
            assert!(counts.switched_within_base > 100, "{counts:?}");
            assert!(counts.switched > counts.switched_within_base, "{counts:?}");
        }
    }

    #[test]
    fn tenants_taking_turns_on_few_slots_never_see_each_other_without_the_scan() {
        let counts = tenants_take_turns(false);
        assert_eq!(counts.copied, 0, "{counts:?}");
        assert!(counts.remapped > 1_000, "{counts:?}");
    }

    /// How many of the `len` bytes from `start` (page-aligned, this process) are mapped to a
    /// page now, from `/proc/self/pagemap` (bit 63: present).
    fn present_pages(start: usize, len: usize) -> usize {
        use std::io::{Read, Seek, SeekFrom};
        let mut pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        pagemap
            .seek(SeekFrom::Start((start / 4096 * 8) as u64))
            .unwrap();
        let mut entries = vec![0u8; len / 4096 * 8];
        pagemap.read_exact(&mut entries).unwrap();
        entries
            .chunks_exact(8)
            .filter(|entry| entry[7] & 0x80 != 0)
            .count()
    }

    /// How many of the `len` bytes from `start` (a page-aligned mapping of a file) are in the
    /// file's page cache (`mincore`).
    fn cached_pages(start: *const u8, len: usize) -> usize {
        let mut resident = vec![0u8; len.div_ceil(4096)];
        // SAFETY: `start..start + len` is a mapping; `resident` has one byte per page.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, resident.as_mut_ptr()) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        resident.iter().filter(|page| *page & 1 != 0).count()
    }

    /// Whether the file system of `dir` drops a clean file's pages from the page cache when
    /// asked (tmpfs does not: its page cache is the file), whatever `image` does.
    fn page_cache_drops_in(dir: &Path) -> bool {
        use std::os::fd::AsRawFd;
        let path = dir.join("probe");
        std::fs::write(&path, vec![1u8; 16 * 4096]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: advice on the test's own file.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        // SAFETY: a read-only mapping of the test's own file, unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                16 * 4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let cached = cached_pages(map as *const u8, 16 * 4096);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(map, 16 * 4096) };
        cached == 0
    }

    /// A memory maps only the image pages its instance reads, not the large folios of the
    /// file's page cache around them (`image`'s module documentation): the reset's scan looks
    /// at every mapped page after every call. Without the image's page cache dropped after its
    /// check and `MADV_RANDOM` on the slot, a read maps 16 to 512 pages.
    #[test]
    fn a_memory_maps_only_the_image_pages_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        if !page_cache_drops_in(dir.path()) {
            eprintln!("this file system keeps files' pages cached (tmpfs?): nothing to check");
            return;
        }
        // 4 MiB, written in one piece as a build writes it: large folios where the file
        // system has them.
        let image = image(dir.path(), 64, 11);
        assert_eq!(
            cached_pages(image.bytes().as_ptr(), image.size()),
            0,
            "the pages the image's check read are still in the page cache"
        );
        let slots = Slots::new(1, policy(true));
        let memory = memory_for(&slots, &image);
        let base = memory.as_ptr() as usize;
        let read = [3, 300, 900];
        for page in read {
            // SAFETY: within the memory's accessible size (the image's 1,024 host pages).
            let byte = unsafe { ((base + page * 4096) as *const u8).read_volatile() };
            assert_eq!(byte, image.bytes()[page * 4096]);
        }
        let mapped = present_pages(base, image.size());
        assert_eq!(
            mapped,
            read.len(),
            "{mapped} of the image's {} pages are mapped after reading {}",
            image.size() / 4096,
            read.len()
        );
        // The same pages again after the reset, now in the page cache: still only they.
        drop(memory);
        let memory = memory_for(&slots, &image);
        assert_eq!(memory.as_ptr() as usize, base, "the slot was not reused");
        for page in read {
            // SAFETY: as above.
            unsafe { ((base + page * 4096) as *const u8).read_volatile() };
        }
        assert_eq!(present_pages(base, image.size()), read.len());
    }

    #[test]
    fn a_memory_nobody_announced_is_refused() {
        let slots = Slots::new(1, policy(true));
        clear_announcement();
        let error = slots
            .new_memory(MemoryType::new(0, None), 0, None, Some(RESERVED), GUARD)
            .err()
            .unwrap();
        assert!(error.contains("no memory image was announced"), "{error}");
    }

    #[test]
    fn a_memory_never_grows_past_its_maximum_or_reservation() {
        let dir = tempfile::tempdir().unwrap();
        let image = image(dir.path(), 2, 9);
        let slots = Slots::new(1, policy(true));
        announce(&image, None);
        let mut memory = slots
            .new_memory(
                MemoryType::new(0, None),
                0,
                Some(4 * PAGE),
                Some(RESERVED),
                GUARD,
            )
            .unwrap();
        assert!(memory.grow_to(4 * PAGE).is_ok());
        assert!(memory.grow_to(5 * PAGE).is_err());
        assert_eq!(memory.byte_size(), 4 * PAGE);
    }

    /// What `slots` relies on in wasmtime 50 without a documented promise: the store's limiter
    /// is asked to grant a new memory just before the memory creator makes it, on the same
    /// thread (else the announcement would be missing and instantiating fails); a memory
    /// larger than the module declares is accepted; and instantiating writes nothing into the
    /// memory of a module without data (the reset after finds no written page).
    #[tokio::test]
    async fn wasmtime_asks_the_limiter_just_before_it_creates_the_memory() {
        use crate::sandbox::{CallState, MemoryLimiter, engine::SandboxEngine};
        let engine = SandboxEngine::new(1).unwrap();
        let guest = engine.builtin_guest().unwrap();
        let pre = guest
            .instance_pre::<CallState>(crate::sandbox::link)
            .unwrap();
        let data = crate::data::Data::default();
        let instantiate = |limiter: MemoryLimiter| {
            let state = CallState::new(
                wasmtime_wasi::WasiCtxBuilder::new().build(),
                limiter,
                &data,
                std::time::Instant::now(),
            );
            let mut store = wasmtime::Store::new(engine.engine(), state);
            store.limiter(|state| &mut state.limits);
            store.set_epoch_deadline(1000);
            let pre = pre.clone();
            async move {
                let instance = pre.instantiate_async(&mut store).await;
                clear_announcement();
                instance.map(|_| store)
            }
        };
        let before = engine.slot_counts();
        let store = instantiate(MemoryLimiter::for_guest(1 << 30, guest.image().clone()))
            .await
            .unwrap();
        drop(store);
        let after = engine.slot_counts();
        assert_eq!(after.created, before.created + 1, "{after:?}");
        if policy(true).scans() {
            assert_eq!(after.copied, before.copied + 1, "{after:?}");
            assert_eq!(
                after.pages_copied, before.pages_copied,
                "wasmtime wrote into the memory"
            );
        }
        // The same store, its limiter announcing nothing: wasmtime's memory is refused.
        let error = instantiate(MemoryLimiter::new(1 << 30))
            .await
            .err()
            .unwrap();
        assert!(
            format!("{error:#}").contains("no memory image was announced"),
            "{error:#}"
        );
    }
}
