//! The key-value store that route code reaches as `filerouter.kv`: state that outlives a request.
//!
//! One store per project, held in the server's memory and shared by all of the project's
//! requests (and kept across hot reloads); a restart empties it. Values are JSON text, encoded
//! and decoded by the guest. Entries may expire. The store is bounded so that route code cannot
//! exhaust the host's memory: see [`Bounds`]. Not a database: nothing is written to disk.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// The limits of one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_keys: usize,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_keys: 100_000,
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
        }
    }
}

/// Why the store refused an operation; the message goes back to the guest.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    #[error("kv keys are at most {0} bytes")]
    KeyTooLong(usize),
    #[error("kv values are at most {0} bytes of JSON")]
    ValueTooLarge(usize),
    #[error("the kv store is full ({0} keys); delete keys or give them a ttl")]
    Full(usize),
    #[error("the value under this key is not an integer")]
    NotAnInteger,
    #[error("integer overflow")]
    Overflow,
}

struct Entry {
    value: String,
    expires: Option<Instant>,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|at| at > now)
    }
}

/// One project's store.
pub struct KvStore {
    bounds: Bounds,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Default for KvStore {
    fn default() -> Self {
        Self::new(Bounds::default())
    }
}

impl KvStore {
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock cannot leave an entry half-written: recover the map.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value under `key`, unless absent or expired.
    pub fn get(&self, key: &str) -> Option<String> {
        let now = Instant::now();
        let mut entries = self.entries();
        match entries.get(key) {
            Some(entry) if entry.live(now) => Some(entry.value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Store `value` under `key`, for `ttl` if given.
    pub fn set(&self, key: &str, value: String, ttl: Option<Duration>) -> Result<(), KvError> {
        self.check_key(key)?;
        if value.len() > self.bounds.max_value_bytes {
            return Err(KvError::ValueTooLarge(self.bounds.max_value_bytes));
        }
        let now = Instant::now();
        let mut entries = self.entries();
        self.make_room(&mut entries, key, now)?;
        entries.insert(
            key.to_string(),
            Entry {
                value,
                expires: ttl.map(|t| now + t),
            },
        );
        Ok(())
    }

    /// Remove `key`; whether it was there (and live).
    pub fn delete(&self, key: &str) -> bool {
        let now = Instant::now();
        self.entries()
            .remove(key)
            .is_some_and(|entry| entry.live(now))
    }

    /// Add `by` to the integer under `key` (absent: 0) and return the sum, atomically. `ttl`
    /// applies when the key is created.
    pub fn incr(&self, key: &str, by: i64, ttl: Option<Duration>) -> Result<i64, KvError> {
        self.check_key(key)?;
        let now = Instant::now();
        let mut entries = self.entries();
        let current = match entries.get(key) {
            Some(entry) if entry.live(now) => Some(
                entry
                    .value
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| KvError::NotAnInteger)?,
            ),
            _ => None,
        };
        let value = current
            .unwrap_or(0)
            .checked_add(by)
            .ok_or(KvError::Overflow)?;
        match entries.get_mut(key) {
            Some(entry) if current.is_some() => entry.value = value.to_string(),
            _ => {
                self.make_room(&mut entries, key, now)?;
                entries.insert(
                    key.to_string(),
                    Entry {
                        value: value.to_string(),
                        expires: ttl.map(|t| now + t),
                    },
                );
            }
        }
        Ok(value)
    }

    fn check_key(&self, key: &str) -> Result<(), KvError> {
        if key.len() > self.bounds.max_key_bytes {
            return Err(KvError::KeyTooLong(self.bounds.max_key_bytes));
        }
        Ok(())
    }

    /// Make sure a new `key` fits: drop expired entries when the store is full.
    fn make_room(
        &self,
        entries: &mut HashMap<String, Entry>,
        key: &str,
        now: Instant,
    ) -> Result<(), KvError> {
        if entries.len() < self.bounds.max_keys || entries.contains_key(key) {
            return Ok(());
        }
        entries.retain(|_, entry| entry.live(now));
        if entries.len() < self.bounds.max_keys {
            Ok(())
        } else {
            Err(KvError::Full(self.bounds.max_keys))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_delete_and_expiry() {
        let kv = KvStore::default();
        assert_eq!(kv.get("a"), None);
        kv.set("a", "1".into(), None).unwrap();
        assert_eq!(kv.get("a").as_deref(), Some("1"));
        assert!(kv.delete("a"));
        assert!(!kv.delete("a"));
        kv.set("b", "\"x\"".into(), Some(Duration::from_millis(1)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(kv.get("b"), None);
    }

    #[test]
    fn incr_counts_and_refuses_non_integers() {
        let kv = KvStore::default();
        assert_eq!(kv.incr("n", 1, None), Ok(1));
        assert_eq!(kv.incr("n", 5, None), Ok(6));
        kv.set("s", "\"text\"".into(), None).unwrap();
        assert_eq!(kv.incr("s", 1, None), Err(KvError::NotAnInteger));
        kv.set("big", i64::MAX.to_string(), None).unwrap();
        assert_eq!(kv.incr("big", 1, None), Err(KvError::Overflow));
    }

    #[test]
    fn bounds_are_enforced_and_expired_keys_make_room() {
        let kv = KvStore::new(Bounds {
            max_keys: 2,
            max_key_bytes: 4,
            max_value_bytes: 8,
        });
        assert_eq!(
            kv.set("toolong", "1".into(), None),
            Err(KvError::KeyTooLong(4))
        );
        assert_eq!(
            kv.set("k", "123456789".into(), None),
            Err(KvError::ValueTooLarge(8))
        );
        kv.set("a", "1".into(), Some(Duration::from_millis(1)))
            .unwrap();
        kv.set("b", "1".into(), None).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        // Full, but "a" has expired: it makes room.
        assert_eq!(kv.set("c", "1".into(), None), Ok(()));
        assert_eq!(kv.set("d", "1".into(), None), Err(KvError::Full(2)));
        // Overwriting an existing key needs no room.
        assert_eq!(kv.set("b", "2".into(), None), Ok(()));
    }
}
