//! The build-cache decoder on generated files: the sealed container (magic, format, flags,
//! checksum, encryption, sections) and the sections inside it (manifest JSON, zstd metadata
//! and native code). A plain file with a valid checksum is easy to forge, so everything after
//! the checksum must hold too: no panic, no unbounded allocation, only `Err` or a cache.
#![no_main]

use filerouter::cache::{self, CacheKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = CacheKey::parse(&"ab".repeat(32)).expect("key");
    // As given, and with the checksum made valid, so the fuzzer reaches the sections.
    for bytes in [data.to_vec(), with_valid_checksum(data)] {
        let _ = cache::seal::open(&bytes, None);
        let _ = cache::seal::open(&bytes, Some(&key));
        let _ = cache::decode(&bytes, None);
    }
    // Sections of the fuzzer's choosing, sealed properly: the manifest and metadata parsers.
    let mut sections: Vec<(&str, &[u8])> = Vec::new();
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate().take(4) {
        sections.push((["manifest", "metadata", "native", "component"][i], chunk));
    }
    if let Ok(sealed) = cache::seal::seal(&sections, None) {
        let _ = cache::decode(&sealed, None);
    }
});

/// `data` with its last 32 bytes replaced by the BLAKE3 checksum of the rest, as a forger
/// of a plain cache would do.
fn with_valid_checksum(data: &[u8]) -> Vec<u8> {
    let body = &data[..data.len().saturating_sub(32)];
    let mut out = body.to_vec();
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out
}
