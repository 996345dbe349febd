//! Where a project's kept traces live: one file per trace in a folder of its own (the
//! project's data folder's `traces/`, a tenant's in its own data folder), bounded in count
//! and in bytes, the oldest removed first. The admin address lists and serves them from here,
//! for one project or one tenant at a time: a store never reads outside its folder, and an
//! id is 32 hexadecimal digits, nothing else.
//!
//! A file's name is `MILLIS-STATUS-ID.json` (when it was kept, the status the client got, its
//! id), so a listing reads names only.

use std::{
    path::{Path, PathBuf},
    sync::Mutex,
    time::SystemTime,
};

use serde::Serialize;

/// Why a store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("{0:?} is not a trace id (32 hexadecimal digits)")]
    BadId(String),
}

/// One kept trace, as a listing shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub id: String,
    pub status: u16,
    /// Milliseconds since the Unix epoch.
    pub kept_at_ms: u64,
    pub bytes: u64,
}

/// A folder of traces, bounded.
#[derive(Debug)]
pub struct TraceStore {
    dir: PathBuf,
    max_traces: usize,
    max_bytes: u64,
    /// Saves and prunes one at a time.
    writing: Mutex<()>,
}

/// Whether `id` can be a trace's id.
pub fn valid_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl TraceStore {
    pub fn new(dir: PathBuf, max_traces: usize, max_bytes: u64) -> TraceStore {
        TraceStore {
            dir,
            max_traces,
            max_bytes,
            writing: Mutex::new(()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn io(&self, path: &Path, e: std::io::Error) -> StoreError {
        StoreError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }

    /// Keep a trace's `text`, then remove the oldest while the store holds too many or too
    /// many bytes (a trace larger than the whole bound is not kept). Blocking.
    pub fn save(&self, id: &str, status: u16, text: &[u8]) -> Result<(), StoreError> {
        if !valid_id(id) {
            return Err(StoreError::BadId(id.into()));
        }
        if text.len() as u64 > self.max_bytes || self.max_traces == 0 {
            return Ok(());
        }
        let _one = self.writing.lock();
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(&self.dir, e))?;
        let millis = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let name = format!("{millis:015}-{status:03}-{id}.json");
        let path = self.dir.join(&name);
        let partial = self.dir.join(format!(".{name}.partial"));
        std::fs::write(&partial, text).map_err(|e| self.io(&partial, e))?;
        std::fs::rename(&partial, &path).map_err(|e| self.io(&path, e))?;
        let mut kept = self.entries()?;
        // Oldest first: names start with the time they were kept.
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        let mut total: u64 = kept.iter().map(|(_, s)| s.bytes).sum();
        let mut count = kept.len();
        for (name, summary) in kept {
            if count <= self.max_traces && total <= self.max_bytes {
                break;
            }
            let path = self.dir.join(&name);
            std::fs::remove_file(&path).map_err(|e| self.io(&path, e))?;
            count -= 1;
            total -= summary.bytes;
        }
        Ok(())
    }

    /// The file names and summaries of the kept traces.
    fn entries(&self) -> Result<Vec<(String, Summary)>, StoreError> {
        let read = match std::fs::read_dir(&self.dir) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io(&self.dir, e)),
        };
        let mut entries = Vec::new();
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(summary) = parse_name(&name) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            entries.push((
                name,
                Summary {
                    bytes: meta.len(),
                    ..summary
                },
            ));
        }
        Ok(entries)
    }

    /// The kept traces, newest first.
    pub fn list(&self) -> Result<Vec<Summary>, StoreError> {
        let mut entries = self.entries()?;
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        Ok(entries.into_iter().map(|(_, summary)| summary).collect())
    }

    /// The trace `id`'s text, if this store keeps it (at most [`MAX_TRACE_FILE_BYTES`]).
    pub fn get(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if !valid_id(id) {
            return Err(StoreError::BadId(id.into()));
        }
        let suffix = format!("-{id}.json");
        let Some((name, _)) = self
            .entries()?
            .into_iter()
            .find(|(name, _)| name.ends_with(&suffix))
        else {
            return Ok(None);
        };
        let path = self.dir.join(name);
        match crate::regular_file::read(&path, MAX_TRACE_FILE_BYTES) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(crate::regular_file::FileError::NotFound(_)) => Ok(None),
            Err(e) => Err(StoreError::Io {
                path,
                reason: e.to_string(),
            }),
        }
    }
}

/// The largest trace file read back.
pub const MAX_TRACE_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// `MILLIS-STATUS-ID.json` → its summary (bytes unknown).
fn parse_name(name: &str) -> Option<Summary> {
    let stem = name.strip_suffix(".json")?;
    let mut parts = stem.splitn(3, '-');
    let millis = parts.next()?.parse().ok()?;
    let status = parts.next()?.parse().ok()?;
    let id = parts.next()?;
    valid_id(id).then(|| Summary {
        id: id.to_string(),
        status,
        kept_at_ms: millis,
        bytes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";

    fn id(n: u8) -> String {
        format!("{n:02x}{}", &A[2..])
    }

    #[test]
    fn keeps_within_count_and_bytes_oldest_removed_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = TraceStore::new(dir.path().join("traces"), 3, 1000);
        for n in 0..5 {
            store.save(&id(n), 500, &[b'x'; 100]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let ids: Vec<String> = store.list().unwrap().into_iter().map(|s| s.id).collect();
        assert_eq!(ids, [id(4), id(3), id(2)], "newest first, three kept");
        store.save(&id(9), 200, &[b'y'; 950]).unwrap();
        let ids: Vec<String> = store.list().unwrap().into_iter().map(|s| s.id).collect();
        assert_eq!(ids, [id(9)], "bytes bound: 950 + 100 > 1000");
        assert_eq!(store.get(&id(9)).unwrap().unwrap(), [b'y'; 950]);
        assert_eq!(store.get(&id(2)).unwrap(), None);
        store.save(&id(8), 500, &[b'z'; 2000]).unwrap();
        assert_eq!(store.get(&id(8)).unwrap(), None, "larger than the bound");
    }

    #[test]
    fn ids_are_hex_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = TraceStore::new(dir.path().to_path_buf(), 3, 1000);
        for bad in ["../../etc/passwd", "", &A.to_uppercase(), &format!("{A}0")] {
            assert!(matches!(store.get(bad), Err(StoreError::BadId(_))), "{bad}");
        }
        assert_eq!(store.get(A).unwrap(), None);
    }
}
