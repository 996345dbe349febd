//! The sealed container a build cache is stored in: named sections, a BLAKE3 checksum over
//! every byte, and optionally AES-256-GCM encryption that authenticates the whole file.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! magic "FRCACHE\n" | format: u32 | flags: u8 (bit 0: encrypted) | [nonce: 12 bytes]
//! body: sections, or their AES-256-GCM ciphertext (header as associated data)
//! checksum: BLAKE3 of everything before it, 32 bytes
//! section: name length: u8 | name | length: u64 | bytes
//! ```
//!
//! This module knows nothing of what the sections hold; see the parent module.

use std::ops::Range;

use aes_gcm::{
    Aes256Gcm, Key, Nonce, Tag,
    aead::{Aead, AeadCore, AeadInPlace, KeyInit, OsRng, Payload},
};

/// The version of this layout and of the sections' meaning. A cache of another format is
/// refused and must be rebuilt. Format 2: the snapshot's memory image replaces the baked
/// component and its native code.
pub const FORMAT: u32 = 2;

const MAGIC: &[u8; 8] = b"FRCACHE\n";
/// Magic, format and flags.
pub const HEADER_LEN: usize = MAGIC.len() + 4 + 1;
const ENCRYPTED: u8 = 1;
const NONCE_LEN: usize = 12;
const CHECKSUM_LEN: usize = 32;
/// AES-GCM's authentication tag, at the end of the ciphertext.
const TAG_LEN: usize = 16;
/// The environment variable that holds the encryption key.
pub const KEY_VAR: &str = "FILEROUTER_CACHE_KEY";

/// An AES-256 key.
#[derive(Clone)]
pub struct CacheKey([u8; 32]);

/// Why a container could not be opened. Every variant is a clear, one-line message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("not a filerouter build cache")]
    NotACache,
    #[error("the cache is truncated (the file is shorter than its contents say)")]
    Truncated,
    #[error(
        "the cache was written in format {found}, this filerouter reads format {FORMAT}: run `filerouter build` again"
    )]
    Format { found: u32 },
    #[error("the cache is corrupt or was modified after the build (checksum mismatch)")]
    Checksum,
    #[error("the cache is encrypted: set {KEY_VAR} to the key it was built with")]
    KeyMissing,
    #[error(
        "the cache is not encrypted, but {KEY_VAR} is set: refusing it (it may have been replaced); build it again with --encrypt, or unset {KEY_VAR}"
    )]
    NotEncrypted,
    #[error("{KEY_VAR} must be 64 hexadecimal characters (a 256-bit key)")]
    KeyMalformed,
    #[error("the cache cannot be decrypted: wrong {KEY_VAR}, or the file was modified")]
    Decrypt,
    #[error("the cache could not be encrypted")]
    Encrypt,
}

impl CacheKey {
    /// Parse 64 hexadecimal characters.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        let bytes = hex::decode(text.trim()).map_err(|_| SealError::KeyMalformed)?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| SealError::KeyMalformed)?;
        Ok(Self(key))
    }

    /// The key in `FILEROUTER_CACHE_KEY`: `None` if unset, an error if malformed.
    pub fn from_env() -> Result<Option<Self>, SealError> {
        match std::env::var(KEY_VAR) {
            Ok(text) => Self::parse(&text).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(SealError::KeyMalformed),
        }
    }
}

/// Seal `sections` into one file's bytes, encrypted under `key` if given.
pub fn seal(sections: &[(&str, &[u8])], key: Option<&CacheKey>) -> Result<Vec<u8>, SealError> {
    let mut body = Vec::with_capacity(sections.iter().map(|(_, b)| b.len() + 64).sum());
    for (name, bytes) in sections {
        let name = name.as_bytes();
        body.push(u8::try_from(name.len()).map_err(|_| SealError::Encrypt)?);
        body.extend_from_slice(name);
        body.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        body.extend_from_slice(bytes);
    }
    let mut out = Vec::with_capacity(body.len() + 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    match key {
        None => {
            out.push(0);
            out.extend_from_slice(&body);
        }
        Some(key) => {
            out.push(ENCRYPTED);
            let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
            out.extend_from_slice(&nonce);
            let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key.0));
            let sealed = cipher
                .encrypt(
                    &nonce,
                    Payload {
                        msg: &body,
                        aad: &out,
                    },
                )
                .map_err(|_| SealError::Encrypt)?;
            out.extend_from_slice(&sealed);
        }
    }
    let checksum = blake3::hash(&out);
    out.extend_from_slice(checksum.as_bytes());
    Ok(out)
}

/// A container opened: its sections, read in place from the container's own bytes (decrypted
/// in place when it is encrypted: no section is copied), and the checksum that ends it.
#[derive(Debug, PartialEq, Eq)]
pub struct Sections {
    bytes: Vec<u8>,
    found: Vec<(String, Range<usize>)>,
    checksum: [u8; CHECKSUM_LEN],
}

impl Sections {
    /// The bytes of the first section called `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.found
            .iter()
            .find(|(found, _)| found == name)
            .map(|(_, range)| &self.bytes[range.clone()])
    }

    /// The sections' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.found.iter().map(|(name, _)| name.as_str())
    }

    /// The verified BLAKE3 checksum that ends the container (over every byte before it): the
    /// container's identity, without hashing it a second time.
    pub fn checksum(&self) -> &[u8; CHECKSUM_LEN] {
        &self.checksum
    }
}

/// Verify and open a container; `key` is needed if it is encrypted. Takes the container's
/// bytes: the sections are read from them where they lie.
pub fn open(mut bytes: Vec<u8>, key: Option<&CacheKey>) -> Result<Sections, SealError> {
    if bytes.len() < MAGIC.len() || !bytes.starts_with(MAGIC) {
        return Err(SealError::NotACache);
    }
    let header_len = HEADER_LEN;
    if bytes.len() < header_len + CHECKSUM_LEN {
        return Err(SealError::Truncated);
    }
    let format = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if format != FORMAT {
        return Err(SealError::Format { found: format });
    }
    let content_len = bytes.len() - CHECKSUM_LEN;
    let mut checksum = [0u8; CHECKSUM_LEN];
    checksum.copy_from_slice(&bytes[content_len..]);
    if blake3::hash(&bytes[..content_len]).as_bytes() != &checksum {
        return Err(SealError::Checksum);
    }
    let flags = bytes[header_len - 1];
    let body = if flags & ENCRYPTED != 0 {
        let key = key.ok_or(SealError::KeyMissing)?;
        let sealed_at = header_len + NONCE_LEN;
        if content_len < sealed_at + TAG_LEN {
            return Err(SealError::Truncated);
        }
        let tag_at = content_len - TAG_LEN;
        let (header, rest) = bytes.split_at_mut(sealed_at);
        let (message, tag) = rest[..content_len - sealed_at].split_at_mut(tag_at - sealed_at);
        let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key.0));
        cipher
            .decrypt_in_place_detached(
                Nonce::from_slice(&header[header_len..]),
                header,
                message,
                Tag::from_slice(tag),
            )
            .map_err(|_| SealError::Decrypt)?;
        sealed_at..tag_at
    } else if key.is_some() {
        // With a key set, only an encrypted cache is trusted: a plain one could be anyone's.
        return Err(SealError::NotEncrypted);
    } else {
        header_len..content_len
    };
    let found = parse_sections(&bytes[..body.end], body.start)?;
    Ok(Sections {
        bytes,
        found,
        checksum,
    })
}

/// Whether a container whose first bytes are `header` is encrypted; `None` if it is not one.
pub fn is_encrypted(header: &[u8]) -> Option<bool> {
    if header.len() < HEADER_LEN || !header.starts_with(MAGIC) {
        return None;
    }
    Some(header[HEADER_LEN - 1] & ENCRYPTED != 0)
}

/// The sections in `body` from `at` to its end: each name with where its bytes lie in `body`.
fn parse_sections(body: &[u8], mut at: usize) -> Result<Vec<(String, Range<usize>)>, SealError> {
    let mut sections = Vec::new();
    while at < body.len() {
        let name_len = body[at] as usize;
        at += 1;
        if body.len() - at < name_len + 8 {
            return Err(SealError::Truncated);
        }
        let name = String::from_utf8_lossy(&body[at..at + name_len]).into_owned();
        at += name_len;
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&body[at..at + 8]);
        at += 8;
        let len =
            usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|_| SealError::Truncated)?;
        if body.len() - at < len {
            return Err(SealError::Truncated);
        }
        sections.push((name, at..at + len));
        at += len;
    }
    Ok(sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> CacheKey {
        CacheKey([byte; 32])
    }

    /// Every section of `bytes` opened, with its bytes.
    fn open(bytes: &[u8], key: Option<&CacheKey>) -> Result<Vec<(String, Vec<u8>)>, SealError> {
        let opened = super::open(bytes.to_vec(), key)?;
        Ok(opened
            .names()
            .map(|name| (name.to_string(), opened.get(name).unwrap().to_vec()))
            .collect())
    }

    #[test]
    fn round_trips_plain_and_encrypted() {
        let sections: [(&str, &[u8]); 2] = [("a", b"hello"), ("b", b"")];
        for k in [None, Some(key(7))] {
            let bytes = seal(&sections, k.as_ref()).unwrap();
            let opened = open(&bytes, k.as_ref()).unwrap();
            assert_eq!(
                opened,
                vec![("a".into(), b"hello".to_vec()), ("b".into(), vec![])]
            );
        }
    }

    #[test]
    fn the_checksum_is_the_last_32_bytes_over_all_before_them() {
        for k in [None, Some(key(3))] {
            let bytes = seal(&[("a", b"hello"), ("b", b"world")], k.as_ref()).unwrap();
            let opened = super::open(bytes.clone(), k.as_ref()).unwrap();
            let (content, checksum) = bytes.split_at(bytes.len() - 32);
            assert_eq!(opened.checksum(), checksum);
            assert_eq!(opened.checksum(), blake3::hash(content).as_bytes());
            assert_eq!(opened.get("b"), Some(&b"world"[..]));
            assert_eq!(opened.get("c"), None);
        }
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        for k in [None, Some(key(1))] {
            let bytes = seal(&[("data", b"some payload")], k.as_ref()).unwrap();
            for i in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[i] ^= 0x01;
                assert!(
                    open(&bad, k.as_ref()).is_err(),
                    "byte {i} flipped was accepted"
                );
            }
        }
    }

    #[test]
    fn wrong_missing_and_malformed_keys() {
        let bytes = seal(&[("x", b"secret")], Some(&key(1))).unwrap();
        assert_eq!(bytes[12], ENCRYPTED);
        assert_eq!(open(&bytes, None), Err(SealError::KeyMissing));
        assert_eq!(open(&bytes, Some(&key(2))), Err(SealError::Decrypt));
        assert!(!bytes.windows(6).any(|w| w == b"secret"));
        assert!(CacheKey::parse("abc").is_err());
        assert!(CacheKey::parse(&"zz".repeat(32)).is_err());
        assert!(CacheKey::parse(&"ab".repeat(32)).is_ok());
    }

    #[test]
    fn a_plain_cache_is_refused_when_a_key_is_given() {
        let plain = seal(&[("x", b"code")], None).unwrap();
        assert_eq!(open(&plain, Some(&key(1))), Err(SealError::NotEncrypted));
        assert_eq!(is_encrypted(&plain), Some(false));
        let sealed = seal(&[("x", b"code")], Some(&key(1))).unwrap();
        assert_eq!(is_encrypted(&sealed[..HEADER_LEN]), Some(true));
        assert_eq!(is_encrypted(b"FRCACHE"), None);
    }

    #[test]
    fn truncation_and_other_formats() {
        let bytes = seal(&[("x", b"payload")], None).unwrap();
        for len in [0, 5, 13, bytes.len() - 1] {
            assert!(open(&bytes[..len], None).is_err());
        }
        let mut other = bytes.clone();
        other[8] = 99;
        assert_eq!(open(&other, None), Err(SealError::Format { found: 99 }));
    }
}
