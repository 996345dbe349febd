//! Compiled functions kept between compilations: Cranelift's incremental cache, on disk under
//! `$FILEROUTER_CACHE_DIR/functions/`.
//!
//! A project's snapshot differs from the built-in guest, and one build from the next, only in
//! its data (the heap baked at import time), never in its code: CPython's ten thousand
//! functions compile to the same machine code every time. Cranelift keys each function by a
//! hash of its IR and the compiler's settings and version; a function found here skips
//! optimisation, register allocation and emission. The first compilation on a machine (the
//! built-in guest, at first start) fills the store; every `filerouter build` after it compiles
//! only what changed.
//!
//! An entry is one file, named by a BLAKE3 hash of the key, holding the value followed by a
//! keyed BLAKE3 hash (a MAC) of key and value under this user's secret
//! (`checked_code::CodeKey`, kept outside the cache folder): an entry that does not match (a
//! torn write, a disk error, an entry written or changed by anyone without the secret) is a
//! miss and is compiled again, never used, so that no one who may write the cache folder can
//! slip machine code into the next compiled guest or plugin. Writes go to a temporary file renamed
//! into place, so concurrent builds never see half an entry.
//!
//! Each build adds a few hundred entries of its own (about 3 MB; the built-in guest's are
//! about 70 MB), so the store is bounded: [`CompiledFunctions::prune`], after a compilation,
//! removes the least recently used entries (a hit refreshes an entry's modification time)
//! while the folder holds more than [`LIMIT_BYTES`].
//!
//! Not here: the compiled artifacts cached whole (`artifacts`: the compiled guest, plugins,
//! and the projects' memory images). Entries are not synced to disk one by one as those
//! are: a guest has about 12,000, and a lost one is only a miss.

use std::{borrow::Cow, fs, path::PathBuf};

use wasmtime::CacheStore;

use super::{artifacts, checked_code::CodeKey};

/// The on-disk store of compiled functions in one folder.
pub struct CompiledFunctions {
    dir: PathBuf,
    /// The key of the entries' checksums.
    key: [u8; blake3::KEY_LEN],
}

impl std::fmt::Debug for CompiledFunctions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledFunctions")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

const HASH_LEN: usize = blake3::OUT_LEN;

/// The most the store keeps on disk after [`CompiledFunctions::prune`].
pub const LIMIT_BYTES: u64 = 256 << 20;

impl CompiledFunctions {
    /// The store in `dir` (created on the first insert), its entries checked with this user's
    /// key.
    pub fn new(dir: PathBuf) -> Self {
        Self::with_key(dir, CodeKey::get())
    }

    /// The store in `dir`, its entries checked with `key`.
    pub fn with_key(dir: PathBuf, key: &CodeKey) -> Self {
        CompiledFunctions {
            dir,
            key: key.derive("compiled functions"),
        }
    }

    /// Remove the least recently used entries until the store holds at most `limit` bytes.
    /// Returns how many entries were removed. Best effort: an entry that cannot be read or
    /// removed is left alone.
    pub fn prune(&self, limit: u64) -> usize {
        let mut entries = Vec::new();
        let mut total = 0u64;
        for shard in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            for entry in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                total += meta.len();
                entries.push((used, meta.len(), entry.path()));
            }
        }
        if total <= limit {
            return 0;
        }
        entries.sort_by_key(|(used, _, _)| *used);
        let mut removed = 0;
        for (_, len, path) in entries {
            if total <= limit {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
                removed += 1;
            }
        }
        removed
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let name = blake3::hash(key).to_hex();
        // 256 subfolders: a guest has about 12,000 functions.
        self.dir.join(&name[..2]).join(&name[2..])
    }

    fn checksum(&self, key: &[u8], value: &[u8]) -> blake3::Hash {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(&(key.len() as u64).to_le_bytes());
        hasher.update(key);
        hasher.update(value);
        hasher.finalize()
    }
}

impl CacheStore for CompiledFunctions {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let path = self.path(key);
        let mut bytes = fs::read(&path).ok()?;
        let value_len = bytes.len().checked_sub(HASH_LEN)?;
        let stored = blake3::Hash::from_bytes(bytes[value_len..].try_into().ok()?);
        if self.checksum(key, &bytes[..value_len]) != stored {
            return None;
        }
        bytes.truncate(value_len);
        // Used now: the last entry `prune` would remove.
        artifacts::mark_used(&path);
        Some(Cow::Owned(bytes))
    }

    fn insert(&self, key: &[u8], mut value: Vec<u8>) -> bool {
        let checksum = self.checksum(key, &value);
        value.extend_from_slice(checksum.as_bytes());
        artifacts::store_atomically_unsynced(&self.path(key), &value).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_comes_back_and_a_damaged_one_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            CompiledFunctions::with_key(dir.path().to_path_buf(), &CodeKey::from_bytes([1; 32]));
        assert!(store.get(b"key").is_none());
        assert!(store.insert(b"key", b"machine code".to_vec()));
        assert_eq!(store.get(b"key").as_deref(), Some(&b"machine code"[..]));
        assert!(store.get(b"other key").is_none());

        // Flip one byte of the value, then cut the file short: both are misses.
        let path = store.path(b"key");
        let mut bytes = fs::read(&path).unwrap();
        bytes[0] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(store.get(b"key").is_none());
        fs::write(&path, &bytes[..5]).unwrap();
        assert!(store.get(b"key").is_none());

        // An entry whose checksum someone without the key made is a miss too.
        let mut forged = b"other code".to_vec();
        let mut hasher = blake3::Hasher::new();
        hasher.update(&3u64.to_le_bytes());
        hasher.update(b"key");
        hasher.update(&forged);
        forged.extend_from_slice(hasher.finalize().as_bytes());
        fs::write(&path, &forged).unwrap();
        assert!(store.get(b"key").is_none());
        let other_key =
            CompiledFunctions::with_key(dir.path().to_path_buf(), &CodeKey::from_bytes([2; 32]));
        assert!(store.insert(b"key", b"machine code".to_vec()));
        assert!(other_key.get(b"key").is_none());

        // Inserting again repairs it.
        assert!(store.insert(b"key", b"machine code".to_vec()));
        assert_eq!(store.get(b"key").as_deref(), Some(&b"machine code"[..]));
    }

    #[test]
    fn pruning_removes_the_least_recently_used_entries_first() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            CompiledFunctions::with_key(dir.path().to_path_buf(), &CodeKey::from_bytes([1; 32]));
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for key in [&b"a"[..], b"b", b"c"] {
            assert!(store.insert(key, vec![0; 1000]));
            let file = fs::File::options()
                .write(true)
                .open(store.path(key))
                .unwrap();
            file.set_modified(old).unwrap();
        }
        // A hit makes "a" the most recently used.
        assert!(store.get(b"a").is_some());
        assert_eq!(store.prune(10_000), 0);
        assert_eq!(store.prune(1100), 2);
        assert!(store.get(b"a").is_some());
        assert!(store.get(b"b").is_none() && store.get(b"c").is_none());
    }
}
