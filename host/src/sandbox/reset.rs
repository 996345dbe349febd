//! How a used memory slot becomes fresh again: which of its pages are restored from the
//! project's image after a call.
//!
//! Every call gets a fresh instance whose linear memory is a slot of ours (`slots`), mapped
//! copy-on-write from the project's image. When the instance is dropped, the slot is put back
//! to the image's contents before it is used again. On Linux 6.7 and later the kernel says
//! (`PAGEMAP_SCAN`) which pages are private to the slot (written since they were mapped from
//! the image) and the image is copied back over only those, up to [`KEEP_RESIDENT`]; past that
//! budget the whole image is mapped afresh and the pages fault in from it when next touched.
//! Without `PAGEMAP_SCAN` the image is always mapped afresh: correct, slower (every page a call
//! touches faults in again). Memory the call grew is dropped either way. Both leave the slot
//! indistinguishable from a fresh copy of the image (`tests/isolation.rs`,
//! `tests/tenant_isolation.rs`).
//!
//! The scan asks only for pages that are present or swapped: Linux 6.18 also reports as written
//! every never-touched page of a page table that exists (measured: write one page of a fresh
//! 2 MiB range and all 512 are reported), which would copy hundreds of untouched pages back.
//!
//! `FILEROUTER_PAGEMAP_SCAN` chooses, read once when the engine is set up: `auto` (the
//! default: use it where the kernel has it), `on` (require it) or `off` (always map afresh;
//! what a kernel before 6.7 does, kept switchable so that path stays tested).
//!
//! This module decides how a slot is reset and finds its written pages; it does not own slots
//! (see [`super::slots`]).

use std::{fmt, fs::File, ops::Range, os::fd::AsRawFd, sync::OnceLock};

/// The environment variable that chooses whether `PAGEMAP_SCAN` is used.
pub const ENV: &str = "FILEROUTER_PAGEMAP_SCAN";

/// How many bytes of written pages are copied back from the image after a call; a call that
/// wrote more gets its slot's image mapped afresh instead. Pages once written stay private to
/// the slot and are reported (and copied) after every later call too, so this also bounds
/// what a warm slot holds.
pub const KEEP_RESIDENT: usize = 32 << 20;

/// A value of `FILEROUTER_PAGEMAP_SCAN` that is none of the accepted ones, or `on` where the
/// kernel lacks the feature.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    #[error("{ENV}={0:?} is not a valid setting: use auto, on or off")]
    Invalid(String),
    #[error(
        "{ENV}=on, but this kernel does not offer PAGEMAP_SCAN (Linux 6.7 or later): \
         use auto or off"
    )]
    Unavailable,
    /// One of the above, as first reported in this process.
    #[error("{0}")]
    Setting(String),
}

/// Whether `PAGEMAP_SCAN` is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagemapScan {
    /// Where the kernel offers it.
    Auto,
    /// Required: setting up the engine fails without it.
    On,
    /// Never: always map the image afresh.
    Off,
}

impl PagemapScan {
    fn parse(value: &str) -> Result<Self, ResetError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "on" | "yes" | "1" | "true" => Ok(Self::On),
            "off" | "no" | "0" | "false" => Ok(Self::Off),
            _ => Err(ResetError::Invalid(value.to_string())),
        }
    }
}

/// How slots are reset in this process: chosen once, when the engine is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetPolicy {
    pub wanted: PagemapScan,
    /// Whether the kernel offers `PAGEMAP_SCAN`.
    pub available: bool,
}

impl ResetPolicy {
    /// The policy `FILEROUTER_PAGEMAP_SCAN` asks for, on this kernel.
    pub fn from_env() -> Result<Self, ResetError> {
        let wanted = match std::env::var(ENV) {
            Ok(value) => PagemapScan::parse(&value)?,
            Err(std::env::VarError::NotPresent) => PagemapScan::Auto,
            Err(std::env::VarError::NotUnicode(value)) => {
                return Err(ResetError::Invalid(value.to_string_lossy().into_owned()));
            }
        };
        let available = pagemap_scan_available();
        if wanted == PagemapScan::On && !available {
            return Err(ResetError::Unavailable);
        }
        Ok(Self { wanted, available })
    }

    /// Whether reset uses `PAGEMAP_SCAN`.
    pub fn scans(&self) -> bool {
        self.available && self.wanted != PagemapScan::Off
    }
}

impl fmt::Display for ResetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scans() {
            let mib = KEEP_RESIDENT >> 20;
            write!(
                f,
                "written pages only (PAGEMAP_SCAN), up to {mib} MiB copied back per call"
            )
        } else {
            let why = if self.wanted == PagemapScan::Off {
                format!("{ENV}=off")
            } else {
                "this kernel has no PAGEMAP_SCAN".to_string()
            };
            write!(f, "the image mapped afresh after every call ({why})")
        }
    }
}

/// The policy of this process: `FILEROUTER_PAGEMAP_SCAN` is read once, when the first engine
/// is set up.
pub fn policy() -> Result<ResetPolicy, ResetError> {
    static POLICY: OnceLock<Result<ResetPolicy, String>> = OnceLock::new();
    POLICY
        .get_or_init(|| ResetPolicy::from_env().map_err(|e| e.to_string()))
        .clone()
        .map_err(ResetError::Setting)
}

/// Whether this kernel offers `PAGEMAP_SCAN` (Linux 6.7 and later).
pub fn pagemap_scan_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let page = vec![0u8; 2 * PAGE];
        let start = (page.as_ptr() as usize).next_multiple_of(PAGE);
        pagemap().is_some_and(|file| written_pages(file, start..start + PAGE).is_ok())
    })
}

/// The host page size the kernel reports regions in.
const PAGE: usize = 4096;

/// `_IOWR('f', 16, struct pm_scan_arg)` from `linux/fs.h`.
const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;
const PAGE_IS_PFNZERO: u64 = 1 << 5;

/// `struct pm_scan_arg` (`linux/fs.h`).
#[repr(C)]
struct ScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` (`linux/fs.h`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `/proc/self/pagemap`, opened once.
pub fn pagemap() -> Option<&'static File> {
    static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
    PAGEMAP
        .get_or_init(|| File::open("/proc/self/pagemap").ok())
        .as_ref()
}

/// The ranges of `range` (page-aligned addresses of this process) that hold pages written
/// since they were mapped: present or swapped, neither file pages (an image mapped
/// copy-on-write and only read) nor the zero page. Blocking, but only a page-table walk.
pub fn written_pages(pagemap: &File, range: Range<usize>) -> std::io::Result<Vec<Range<usize>>> {
    let mut found = Vec::new();
    // Enough for a slot's written runs in one call (after examples/hello's trivial request,
    // about 290; each further call walks on from where the last stopped).
    let mut regions = [PageRegion::default(); 512];
    let mut at = range.start as u64;
    let end = range.end as u64;
    while at < end {
        let mut arg = ScanArg {
            size: std::mem::size_of::<ScanArg>() as u64,
            flags: 0,
            start: at,
            end,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            // Written, and not a file page nor the zero page...
            category_inverted: PAGE_IS_FILE | PAGE_IS_PFNZERO,
            category_mask: PAGE_IS_WRITTEN | PAGE_IS_FILE | PAGE_IS_PFNZERO,
            // ...and there at all (see the module documentation).
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_WRITTEN,
        };
        // SAFETY: `arg` and `regions` are valid for the call; the kernel writes at most
        // `vec_len` regions and `walk_end`, and reads page tables of this process only.
        let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for region in &regions[..n as usize] {
            found.push(region.start as usize..region.end as usize);
        }
        if arg.walk_end <= at {
            break;
        }
        at = arg.walk_end;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_in_any_case_and_nonsense_is_named() {
        assert_eq!(PagemapScan::parse("AUTO").unwrap(), PagemapScan::Auto);
        assert_eq!(PagemapScan::parse("").unwrap(), PagemapScan::Auto);
        assert_eq!(PagemapScan::parse("On").unwrap(), PagemapScan::On);
        assert_eq!(PagemapScan::parse("off").unwrap(), PagemapScan::Off);
        let error = PagemapScan::parse("sometimes").unwrap_err().to_string();
        assert!(
            error.contains("FILEROUTER_PAGEMAP_SCAN=\"sometimes\""),
            "{error}"
        );
        assert!(error.contains("auto, on or off"), "{error}");
    }

    #[test]
    fn off_never_scans_and_is_described_as_a_fresh_mapping() {
        let policy = ResetPolicy {
            wanted: PagemapScan::Off,
            available: true,
        };
        assert!(!policy.scans());
        assert!(policy.to_string().starts_with("the image mapped afresh"));
        let auto = ResetPolicy {
            wanted: PagemapScan::Auto,
            available: true,
        };
        assert!(auto.scans());
        assert!(auto.to_string().starts_with("written pages only"));
    }

    /// What the reset relies on in the kernel: in a file mapped privately, pages only read
    /// are not reported, written ones are, and untouched pages beside them are not (even in a
    /// 2 MiB range whose page table exists). Fails loudly where the kernel changes that.
    #[test]
    fn the_scan_reports_exactly_the_written_pages_of_a_private_file_mapping() {
        if !pagemap_scan_available() {
            eprintln!("no PAGEMAP_SCAN on this kernel: nothing to check");
            return;
        }
        let mut file = tempfile::tempfile().unwrap();
        let len = 4 << 20;
        std::io::Write::write_all(&mut file, &vec![1u8; len]).unwrap();
        // SAFETY: a private mapping of the test's own file.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        } as usize;
        assert_ne!(base as *mut libc::c_void, libc::MAP_FAILED);
        let page = |n: usize| (base + n * PAGE) as *mut u8;
        // SAFETY: within the mapping.
        unsafe {
            for n in [0, 5, 600, 601] {
                assert_eq!(page(n).read_volatile(), 1);
            }
            for n in [3, 600, 900] {
                page(n).write_volatile(2);
            }
        }
        let written = written_pages(pagemap().unwrap(), base..base + len).unwrap();
        let pages: Vec<usize> = written
            .iter()
            .flat_map(|r| (r.start..r.end).step_by(PAGE))
            .map(|address| (address - base) / PAGE)
            .collect();
        assert_eq!(pages, vec![3, 600, 900]);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}
