//! Image layers: a memory image kept as the pages where it differs from another image of the
//! same size, its base.
//!
//! Every project's image starts from the same interpreter, so two tenants' images are mostly
//! the same pages (two of `bench/tenants.sh`'s generated projects: 15 of 7,344). Kept as a layer
//! over a base (`images/<image hash>.layer`, beside the base's `<base hash>.img`), an image costs
//! the disk its own pages only, its common pages are one file's page cache that every slot maps
//! whichever tenant it serves, and a slot switching between two layers of one base remaps only
//! the pages where either differs from it (`image`, `slots`).
//!
//! A layer file, all integers little-endian:
//!
//! | bytes | what |
//! |---|---|
//! | 0..32 | keyed BLAKE3 of the image's hash and bytes 32.. (the key: `checked_code::CodeKey`) |
//! | 32..64 | [`MAGIC`] |
//! | 64..96 | the base image's BLAKE3 hash |
//! | 96..104 | the image's length in bytes (the base's too) |
//! | 104..108 | how many runs, at most [`MAX_RUNS`] |
//! | 108..112 | zero |
//! | 112.. | each run: its first page and its length in pages (u32, u32) |
//! | then | zeros to a page boundary, then the runs' pages one after the other |
//!
//! The MAC makes a layer as trustworthy as compiled code (`checked_code`): written by this
//! user's filerouter for this image, and unchanged since. Its bytes are right by construction:
//! they are made from the image's bytes, checked against the build cache's hash, and a base
//! that was checked against its own.
//!
//! This module computes, writes and reads layers; it does not map them (`image`).

use std::ops::Range;

/// The host page: the unit a layer is made of.
pub const PAGE: usize = 4096;

/// The most runs a layer may have: each is two more mappings in every slot that maps it.
pub const MAX_RUNS: usize = 256;

/// What bytes 32..64 of a layer file are.
pub const MAGIC: &[u8; 32] = b"filerouter memory image layer 1\n";

/// Where the header's fixed part ends and the runs start.
const RUNS_AT: usize = 112;

/// A run of pages where an image differs from its base: `image` (bytes of the image) are the
/// layer file's bytes from `file_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub image: Range<usize>,
    pub file_offset: usize,
}

/// A layer file read and checked.
#[derive(Debug)]
pub struct Layer {
    pub base: blake3::Hash,
    pub len: usize,
    pub runs: Vec<Run>,
}

/// The runs of pages where `image` differs from `base`, or `None` when a layer would not pay:
/// other lengths, not whole pages, more than [`MAX_RUNS`] runs, or more than half the pages.
pub fn difference(base: &[u8], image: &[u8]) -> Option<Vec<Range<usize>>> {
    if base.len() != image.len() || image.is_empty() || !image.len().is_multiple_of(PAGE) {
        return None;
    }
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut differing = 0;
    for (index, (ours, theirs)) in image.chunks(PAGE).zip(base.chunks(PAGE)).enumerate() {
        if ours == theirs {
            continue;
        }
        differing += 1;
        let start = index * PAGE;
        match runs.last_mut() {
            Some(last) if last.end == start => last.end = start + PAGE,
            _ => {
                if runs.len() == MAX_RUNS {
                    return None;
                }
                runs.push(start..start + PAGE);
            }
        }
    }
    (differing * 2 <= image.len() / PAGE).then_some(runs)
}

/// The bytes of the layer file of `image` (whose hash is `hash`) over the base whose hash is
/// `base`, differing from it in `runs` (from [`difference`]), signed with `key`.
pub fn encode(
    key: &[u8; blake3::KEY_LEN],
    hash: &blake3::Hash,
    base: &blake3::Hash,
    image: &[u8],
    runs: &[Range<usize>],
) -> Vec<u8> {
    let header = (RUNS_AT + runs.len() * 8).next_multiple_of(PAGE);
    let pages: usize = runs.iter().map(|run| run.end - run.start).sum();
    let mut bytes = Vec::with_capacity(header + pages);
    bytes.extend_from_slice(&[0; 32]);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(base.as_bytes());
    bytes.extend_from_slice(&(image.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    for run in runs {
        bytes.extend_from_slice(&((run.start / PAGE) as u32).to_le_bytes());
        bytes.extend_from_slice(&(((run.end - run.start) / PAGE) as u32).to_le_bytes());
    }
    bytes.resize(header, 0);
    for run in runs {
        bytes.extend_from_slice(&image[run.clone()]);
    }
    let mac = mac(key, hash, &bytes[32..]);
    bytes[..32].copy_from_slice(mac.as_bytes());
    bytes
}

/// Read the layer file `bytes` of the image whose hash is `hash`, checking its MAC with `key`
/// and its shape. The error is the end of a sentence that starts with the file.
pub fn decode(
    key: &[u8; blake3::KEY_LEN],
    hash: &blake3::Hash,
    bytes: &[u8],
) -> Result<Layer, String> {
    if bytes.len() < RUNS_AT || &bytes[32..64] != MAGIC {
        return Err("is not a filerouter memory image layer: substituted or damaged".into());
    }
    if mac(key, hash, &bytes[32..]) != blake3::Hash::from_bytes(word(bytes, 0)) {
        return Err(
            "was not written for this image by this user's filerouter: substituted or damaged"
                .into(),
        );
    }
    let base = blake3::Hash::from_bytes(word(bytes, 64));
    let len = u64::from_le_bytes(bytes[96..104].try_into().unwrap_or_default());
    let len = usize::try_from(len).map_err(|_| "names an image too large")?;
    let count = u32::from_le_bytes(bytes[104..108].try_into().unwrap_or_default()) as usize;
    if count > MAX_RUNS || !len.is_multiple_of(PAGE) {
        return Err(format!("is malformed ({count} runs, {len} bytes)"));
    }
    let header = (RUNS_AT + count * 8).next_multiple_of(PAGE);
    let mut runs: Vec<Run> = Vec::with_capacity(count);
    let mut file_offset = header;
    for index in 0..count {
        let at = RUNS_AT + index * 8;
        let field = |from: usize| {
            bytes
                .get(from..from + 4)
                .and_then(|b| b.try_into().ok())
                .map(|b| u32::from_le_bytes(b) as usize * PAGE)
        };
        let (Some(start), Some(pages)) = (field(at), field(at + 4)) else {
            return Err("ends inside its list of runs".into());
        };
        let after_last = runs.last().map_or(0, |last: &Run| last.image.end);
        if pages == 0 || start < after_last || start + pages > len {
            return Err(format!(
                "has a run out of order or out of the image (run {index})"
            ));
        }
        runs.push(Run {
            image: start..start + pages,
            file_offset,
        });
        file_offset += pages;
    }
    if file_offset != bytes.len() {
        return Err(format!(
            "is {} bytes where its runs make {file_offset}",
            bytes.len()
        ));
    }
    Ok(Layer { base, len, runs })
}

/// 32 bytes of `bytes` from `at` (within them: the caller checked the length).
fn word(bytes: &[u8], at: usize) -> [u8; 32] {
    let mut word = [0; 32];
    word.copy_from_slice(&bytes[at..at + 32]);
    word
}

fn mac(key: &[u8; blake3::KEY_LEN], hash: &blake3::Hash, rest: &[u8]) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new_keyed(key);
    hasher.update(hash.as_bytes());
    hasher.update(rest);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(values: &[u8]) -> Vec<u8> {
        values.iter().flat_map(|v| [*v; PAGE]).collect()
    }

    #[test]
    fn the_difference_is_the_runs_of_differing_pages() {
        let base = pages(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let image = pages(&[0, 9, 9, 3, 4, 5, 9, 7]);
        assert_eq!(
            difference(&base, &image),
            Some(vec![PAGE..3 * PAGE, 6 * PAGE..7 * PAGE])
        );
        assert_eq!(difference(&base, &base), Some(vec![]));
        // More than half the pages, another length, or not whole pages: no layer.
        assert_eq!(difference(&base, &pages(&[9, 9, 9, 9, 9, 5, 6, 7])), None);
        assert_eq!(difference(&base, &pages(&[0, 1, 2])), None);
        assert_eq!(difference(&base[..PAGE + 1], &image[..PAGE + 1]), None);
    }

    #[test]
    fn too_many_runs_make_no_layer() {
        let count = (MAX_RUNS + 1) * 4;
        let base = vec![0u8; count * PAGE];
        let mut image = base.clone();
        for run in 0..=MAX_RUNS {
            image[run * 4 * PAGE] = 1;
        }
        assert_eq!(difference(&base, &image), None);
        image[MAX_RUNS * 4 * PAGE] = 0;
        assert_eq!(difference(&base, &image).map(|r| r.len()), Some(MAX_RUNS));
    }

    #[test]
    fn a_layer_reads_back_as_written_and_only_with_its_key_and_image() {
        let key = [7; 32];
        let base = pages(&[0, 1, 2, 3, 4, 5]);
        let image = pages(&[0, 8, 2, 3, 9, 9]);
        let (hash, base_hash) = (blake3::hash(&image), blake3::hash(&base));
        let runs = difference(&base, &image).unwrap();
        let bytes = encode(&key, &hash, &base_hash, &image, &runs);
        assert_eq!(bytes.len(), PAGE + 3 * PAGE);
        let layer = decode(&key, &hash, &bytes).unwrap();
        assert_eq!(layer.base, base_hash);
        assert_eq!(layer.len, image.len());
        let mut rebuilt = base.clone();
        for run in &layer.runs {
            rebuilt[run.image.clone()]
                .copy_from_slice(&bytes[run.file_offset..run.file_offset + run.image.len()]);
        }
        assert_eq!(rebuilt, image);

        assert!(decode(&[8; 32], &hash, &bytes).is_err(), "another key");
        assert!(decode(&key, &base_hash, &bytes).is_err(), "another image");
        let mut damaged = bytes.clone();
        damaged[PAGE + 5] ^= 1;
        assert!(decode(&key, &hash, &damaged).is_err(), "a page changed");
        assert!(decode(&key, &hash, &bytes[..bytes.len() - PAGE]).is_err());
        assert!(decode(&key, &hash, &bytes[..40]).is_err());
    }
}
