//! Where a project's kept traces live: one file per trace in a folder of its own (the
//! project's data folder's `traces/`, a tenant's in its own data folder), bounded in count
//! and in bytes, the oldest removed first. The admin address lists and serves them from here,
//! for one project or one tenant at a time: a store never reads outside its folder, and an
//! id is 32 hexadecimal digits, nothing else.
//!
//! A file's name is `MILLIS-STATUS-ID.json` (when it was kept, the status the client got, its
//! id), so a listing reads names only. Saving does not list the folder: the store reads it
//! once, at its first save, and keeps the names and sizes it holds in memory from then on
//! (the admin address's listings still read the folder).

use std::{
    collections::VecDeque,
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
    /// Saves and prunes one at a time; the files kept (name, bytes), oldest first, once the
    /// first save has read the folder.
    writing: Mutex<Option<VecDeque<(String, u64)>>>,
}

/// What one [`TraceStore::save`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Saved {
    /// Bytes written (0: not kept).
    pub written: u64,
    /// The trace alone is larger than the store's bound in bytes: not kept.
    pub too_large: bool,
    /// Older traces removed because the store held too many.
    pub removed_for_count: u64,
    /// Older traces removed because the store held too many bytes.
    pub removed_for_bytes: u64,
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
            writing: Mutex::new(None),
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
    pub fn save(&self, id: &str, status: u16, text: &[u8]) -> Result<Saved, StoreError> {
        if !valid_id(id) {
            return Err(StoreError::BadId(id.into()));
        }
        if self.max_traces == 0 {
            return Ok(Saved::default());
        }
        if text.len() as u64 > self.max_bytes {
            return Ok(Saved {
                too_large: true,
                ..Saved::default()
            });
        }
        let mut writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        if writing.is_none() {
            let mut entries = self.entries()?;
            // Oldest first: names start with the time they were kept.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            *writing = Some(
                entries
                    .into_iter()
                    .map(|(name, summary)| (name, summary.bytes))
                    .collect(),
            );
        }
        let Some(kept) = writing.as_mut() else {
            return Ok(Saved::default());
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(&self.dir, e))?;
        let millis = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let name = format!("{millis:015}-{status:03}-{id}.json");
        let path = self.dir.join(&name);
        let partial = self.dir.join(format!(".{name}.partial"));
        std::fs::write(&partial, text).map_err(|e| self.io(&partial, e))?;
        std::fs::rename(&partial, &path).map_err(|e| self.io(&path, e))?;
        let mut saved = Saved {
            written: text.len() as u64,
            ..Saved::default()
        };
        kept.push_back((name, text.len() as u64));
        let mut total: u64 = kept.iter().map(|(_, bytes)| bytes).sum();
        while kept.len() > self.max_traces || total > self.max_bytes {
            let Some((name, bytes)) = kept.pop_front() else {
                break;
            };
            if kept.len() + 1 > self.max_traces {
                saved.removed_for_count += 1;
            } else {
                saved.removed_for_bytes += 1;
            }
            total -= bytes;
            let path = self.dir.join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                // Removed by hand meanwhile: it is gone, as wanted.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io(&path, e)),
            }
        }
        Ok(saved)
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
        let saved = store.save(&id(8), 500, &[b'z'; 2000]).unwrap();
        assert_eq!(store.get(&id(8)).unwrap(), None, "larger than the bound");
        assert!(saved.too_large && saved.written == 0, "{saved:?}");
    }

    #[test]
    fn a_save_says_what_it_wrote_and_removed_and_a_new_store_knows_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let store = TraceStore::new(dir.path().join("traces"), 2, 250);
        let mut saves = Vec::new();
        for n in 0..3 {
            saves.push(store.save(&id(n), 500, &[b'x'; 100]).unwrap());
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(
            saves[2],
            Saved {
                written: 100,
                removed_for_count: 1,
                ..Saved::default()
            }
        );
        // Another store on the same folder (a reloaded tenant) starts from what is there.
        let again = TraceStore::new(dir.path().join("traces"), 2, 250);
        let saved = again.save(&id(7), 500, &[b'y'; 160]).unwrap();
        assert_eq!((saved.removed_for_count, saved.removed_for_bytes), (1, 1));
        let ids: Vec<String> = again.list().unwrap().into_iter().map(|s| s.id).collect();
        assert_eq!(ids, [id(7)]);
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
