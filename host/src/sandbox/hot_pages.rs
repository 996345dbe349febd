//! Which pages of a memory image's file requests read, written down beside it so that the next
//! process to map the image has them read before its first request needs them.
//!
//! An image's page cache is kept to the pages requests read, in small folios (see `image`): a
//! process that maps an image none of whose pages are cached (the first after a build, or one
//! after the kernel dropped them) reads every page its first requests need from the disk, one
//! at a time, in those requests' time (examples/hello: about 560 pages, 30 to 80 ms of its
//! first answer). So once a process has served [`RECORD_AFTER`] requests from an image, the
//! pages of the image's file in the page cache are written down (`images/<hash>.hot`, one bit a
//! page, joined with what an earlier record named), and a process that maps the image later
//! asks the kernel to read those pages ([`preload`]: `POSIX_FADV_WILLNEED` a run at a time,
//! which reads exactly the run, in small folios, without waiting for the disk) as it maps it.
//!
//! A record only names pages to read: a damaged, stale or foreign one costs reads, never a
//! wrong byte (the bytes are the checked image file's). One of another size is ignored.
//!
//! Not here: which pages are dropped after an image's hash check, and when a record is due
//! (`image`); how slots map images (`slots`).

use std::{fs::File, ops::Range, os::fd::AsRawFd, path::Path};

use super::artifacts;

/// The host's page size, in which the page cache is looked at.
pub const HOST_PAGE: usize = 4096;

/// After how many requests served from an image its record is written (joined with the one
/// there), and again after [`RECORD_AGAIN_AFTER`]: the first requests read most of the pages
/// any request reads (interpreter, dispatcher, the routes' modules).
pub const RECORD_AFTER: u64 = 16;

/// The second, later record: routes first called after the first [`RECORD_AFTER`] requests.
pub const RECORD_AGAIN_AFTER: u64 = 1024;

/// The start of a record file.
const MAGIC: &[u8; 16] = b"filerouter-hot1\n";

/// Which of a file's `len` bytes' pages are in the page cache: one byte per page, bit 0 set
/// for a cached one (`mincore` over a mapping of the file made for the purpose, which reads no
/// page). `None` if the file cannot be mapped or looked at.
pub fn resident(file: &File, len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return None;
    }
    // SAFETY: a fresh read-only shared mapping of `len` bytes, unmapped below; nothing reads
    // through it (mincore only looks at the page cache).
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return None;
    }
    let mut pages = vec![0u8; len.div_ceil(HOST_PAGE)];
    // SAFETY: `pages` has one byte per page of the mapping.
    let rc = unsafe { libc::mincore(map, len, pages.as_mut_ptr()) };
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(map, len) };
    (rc == 0).then_some(pages)
}

/// Where the record of the image file `image` is kept: beside it, `<hash>.hot`.
pub fn record_path(image: &Path) -> std::path::PathBuf {
    image.with_extension("hot")
}

/// The pages a record names, one `bool` a page: `None` if there is none, or it is not a
/// record of a file of `len` bytes.
fn read(path: &Path, len: usize) -> Option<Vec<bool>> {
    let bytes = std::fs::read(path).ok()?;
    let pages = len.div_ceil(HOST_PAGE);
    let rest = bytes.strip_prefix(MAGIC)?;
    let (count, bits) = rest.split_first_chunk::<8>()?;
    if u64::from_le_bytes(*count) != pages as u64 || bits.len() != pages.div_ceil(8) {
        return None;
    }
    Some(
        (0..pages)
            .map(|page| bits[page / 8] & (1 << (page % 8)) != 0)
            .collect(),
    )
}

/// Whether the record of the image file at `image` (`len` bytes) names every page `resident`
/// (one byte a page, bit 0 set for a cached one, as [`resident`] gives) marks: with no record,
/// whether none is marked.
pub fn covers(image: &Path, len: usize, resident: &[u8]) -> bool {
    let named = read(&record_path(image), len).unwrap_or_default();
    resident
        .iter()
        .enumerate()
        .all(|(page, cached)| cached & 1 == 0 || named.get(page).copied().unwrap_or(false))
}

/// The record file's bytes for `pages`.
fn encode(pages: &[bool]) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&(pages.len() as u64).to_le_bytes());
    let mut bits = vec![0u8; pages.len().div_ceil(8)];
    for (page, _) in pages.iter().enumerate().filter(|(_, hot)| **hot) {
        bits[page / 8] |= 1 << (page % 8);
    }
    bytes.extend_from_slice(&bits);
    bytes
}

/// The byte ranges of a file of `len` bytes that `pages` names, runs of pages joined.
fn runs(pages: &[bool], len: usize) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (page, _) in pages.iter().enumerate().filter(|(_, hot)| **hot) {
        let start = page * HOST_PAGE;
        let end = (start + HOST_PAGE).min(len);
        match runs.last_mut() {
            Some(last) if last.end == start => last.end = end,
            _ => runs.push(start..end),
        }
    }
    runs
}

/// Write down which pages of `file` (`len` bytes, the image file at `image`) are in the page
/// cache now, joined with the pages its record named already. Returns how many pages the
/// record names, or why it could not be written (best effort: a missing record costs the next
/// process's first requests their reads, nothing more).
pub fn record(file: &File, len: usize, image: &Path) -> Result<usize, String> {
    let cached = resident(file, len).ok_or("the page cache could not be looked at")?;
    let path = record_path(image);
    let mut pages = read(&path, len).unwrap_or_else(|| vec![false; len.div_ceil(HOST_PAGE)]);
    for (hot, cached) in pages.iter_mut().zip(&cached) {
        *hot |= cached & 1 != 0;
    }
    artifacts::store_atomically_unsynced(&path, &encode(&pages))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(pages.iter().filter(|hot| **hot).count())
}

/// Ask the kernel to read the pages the record of the image file at `image` names into the
/// page cache, if there is a record for a file of `len` bytes: returns how many pages it
/// names (0: none). Reads happen in the background (the first request to need a page still
/// being read waits for it); each run is read alone, in small folios, and nothing around it.
pub fn preload(file: &File, len: usize, image: &Path) -> usize {
    let path = record_path(image);
    let Some(pages) = read(&path, len) else {
        return 0;
    };
    artifacts::mark_used(&path);
    let fd = file.as_raw_fd();
    for run in runs(&pages, len) {
        // SAFETY: advice on a descriptor the caller owns; it reads no memory of ours.
        let rc = unsafe {
            libc::posix_fadvise(
                fd,
                run.start as libc::off_t,
                run.len() as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
        if rc != 0 {
            tracing::debug!(
                "{}: posix_fadvise: {}",
                path.display(),
                std::io::Error::from_raw_os_error(rc)
            );
            break;
        }
    }
    pages.iter().filter(|hot| **hot).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{io::Write, os::unix::fs::FileExt};

    const PAGES: usize = 64;

    /// A file of `PAGES` pages on the disk the cache folder is on (not a memory file system,
    /// whose pages cannot be dropped), none of them cached.
    fn uncached_file(dir: &Path) -> (File, std::path::PathBuf) {
        let path = dir.join("0123.img");
        let mut file = File::create(&path).unwrap();
        file.write_all(&vec![7u8; PAGES * HOST_PAGE]).unwrap();
        file.sync_all().unwrap();
        drop_cache(&file);
        (File::open(&path).unwrap(), path)
    }

    fn drop_cache(file: &File) {
        // SAFETY: advice on a descriptor of ours.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
    }

    fn cached(file: &File) -> Vec<usize> {
        let pages = resident(file, PAGES * HOST_PAGE).unwrap();
        (0..PAGES).filter(|&page| pages[page] & 1 != 0).collect()
    }

    fn test_dir() -> tempfile::TempDir {
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        std::fs::create_dir_all(&target).unwrap();
        tempfile::tempdir_in(target).unwrap()
    }

    #[test]
    fn the_pages_requests_read_are_read_again_alone_in_the_next_process() {
        let dir = test_dir();
        let (file, path) = uncached_file(dir.path());
        assert_eq!(
            cached(&file),
            Vec::<usize>::new(),
            "the test needs a disk file"
        );
        // A process's requests read a few pages, each alone (`image`'s MADV_RANDOM).
        // SAFETY: advice on a descriptor of ours.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let read = [3, 10, 11, 12, 40];
        let mut page = vec![0u8; HOST_PAGE];
        for n in read {
            file.read_exact_at(&mut page, (n * HOST_PAGE) as u64)
                .unwrap();
        }
        assert_eq!(cached(&file), read);
        assert_eq!(record(&file, PAGES * HOST_PAGE, &path), Ok(read.len()));
        assert!(record_path(&path).ends_with("0123.hot"));

        // The next process: nothing cached, then the record read.
        drop_cache(&file);
        assert_eq!(cached(&file), Vec::<usize>::new());
        let fresh = File::open(&path).unwrap();
        assert_eq!(preload(&fresh, PAGES * HOST_PAGE, &path), read.len());
        let started = std::time::Instant::now();
        while cached(&fresh).len() < read.len() && started.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Exactly those pages: none around them (no readahead, no large folio).
        assert_eq!(cached(&fresh), read);

        // A later record joins what that process read to what the record named.
        drop_cache(&file);
        fresh
            .read_exact_at(&mut page, (50 * HOST_PAGE) as u64)
            .unwrap();
        assert_eq!(record(&fresh, PAGES * HOST_PAGE, &path), Ok(read.len() + 1));
    }

    #[test]
    fn a_damaged_or_foreign_record_is_ignored() {
        let dir = test_dir();
        let (file, path) = uncached_file(dir.path());
        let len = PAGES * HOST_PAGE;
        let good = encode(&(0..PAGES).map(|page| page % 2 == 0).collect::<Vec<_>>());
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("cut short", good[..good.len() - 1].to_vec()),
            ("one byte more", [good.as_slice(), &[0]].concat()),
            ("another magic", [b"x".as_slice(), &good[1..]].concat()),
            ("another size", encode(&[true; PAGES * 2])),
        ];
        for (what, bytes) in cases {
            std::fs::write(record_path(&path), &bytes).unwrap();
            assert_eq!(preload(&file, len, &path), 0, "{what}");
            assert_eq!(cached(&file), Vec::<usize>::new(), "{what}");
            // Writing a record over it starts afresh.
            assert_eq!(record(&file, len, &path), Ok(0), "{what}");
        }
        std::fs::write(record_path(&path), &good).unwrap();
        assert_eq!(preload(&file, len, &path), PAGES / 2);
        assert!(read(&record_path(&path), len + HOST_PAGE).is_none());
    }

    #[test]
    fn runs_join_neighbouring_pages_and_stop_at_the_end_of_the_file() {
        let pages = [true, true, false, true, false, true];
        let len = 5 * HOST_PAGE + 100;
        assert_eq!(
            runs(&pages, len),
            vec![
                0..2 * HOST_PAGE,
                3 * HOST_PAGE..4 * HOST_PAGE,
                5 * HOST_PAGE..len
            ]
        );
        assert_eq!(read_back(&pages), pages);
    }

    fn read_back(pages: &[bool]) -> Vec<bool> {
        let dir = test_dir();
        let path = dir.path().join("x.hot");
        std::fs::write(&path, encode(pages)).unwrap();
        read(&path, pages.len() * HOST_PAGE).unwrap()
    }
}
