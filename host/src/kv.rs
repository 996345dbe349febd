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
    /// Keys and values of all entries together (each entry also counts [`ENTRY_OVERHEAD`]).
    pub max_total_bytes: usize,
    /// The longest time to live.
    pub max_ttl: Duration,
}

/// What one entry costs beyond its key and value, for [`Bounds::max_total_bytes`].
pub const ENTRY_OVERHEAD: usize = 64;

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_keys: 100_000,
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
            max_total_bytes: 64 * 1024 * 1024,
            max_ttl: Duration::from_secs(10 * 365 * 24 * 3600),
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
    #[error("the kv store is full ({0} bytes of keys and values); delete keys or give them a ttl")]
    FullBytes(usize),
    #[error("a kv ttl is at most {0} seconds")]
    TtlTooLong(u64),
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

fn cost(key: &str, value: &str) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

/// The entries and what they cost together.
#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    bytes: usize,
}

impl Entries {
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let entry = self.map.remove(key)?;
        self.bytes -= cost(key, &entry.value);
        Some(entry)
    }

    fn insert(&mut self, key: &str, entry: Entry) {
        self.remove(key);
        self.bytes += cost(key, &entry.value);
        self.map.insert(key.to_string(), entry);
    }

    fn drop_expired(&mut self, now: Instant) {
        let mut freed = 0;
        self.map.retain(|key, entry| {
            let live = entry.live(now);
            if !live {
                freed += cost(key, &entry.value);
            }
            live
        });
        self.bytes -= freed;
    }
}

/// One project's store.
pub struct KvStore {
    bounds: Bounds,
    entries: Mutex<Entries>,
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
            entries: Mutex::new(Entries::default()),
        }
    }

    /// A new store with this one's live entries and other `bounds` (a tenant reconfigured).
    /// Entries past the new bounds stay until they are deleted or expire; new ones must fit.
    pub fn with_bounds(&self, bounds: Bounds) -> std::sync::Arc<KvStore> {
        let now = Instant::now();
        let mut copy = Entries::default();
        for (key, entry) in self.entries().map.iter().filter(|(_, e)| e.live(now)) {
            copy.insert(
                key,
                Entry {
                    value: entry.value.clone(),
                    expires: entry.expires,
                },
            );
        }
        std::sync::Arc::new(KvStore {
            bounds,
            entries: Mutex::new(copy),
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock cannot leave an entry half-written: recover the map.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value under `key`, unless absent or expired.
    pub fn get(&self, key: &str) -> Option<String> {
        let now = Instant::now();
        let mut entries = self.entries();
        match entries.map.get(key) {
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
        let expires = self.expiry(now, ttl)?;
        let mut entries = self.entries();
        self.make_room(&mut entries, key, cost(key, &value), now)?;
        entries.insert(key, Entry { value, expires });
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
        let current = match entries.map.get(key) {
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
            .ok_or(KvError::Overflow)?
            .to_string();
        let expires = match current {
            Some(_) => entries.map.get(key).and_then(|entry| entry.expires),
            None => self.expiry(now, ttl)?,
        };
        self.make_room(&mut entries, key, cost(key, &value), now)?;
        let sum = value.parse().map_err(|_| KvError::Overflow)?;
        entries.insert(key, Entry { value, expires });
        Ok(sum)
    }

    fn check_key(&self, key: &str) -> Result<(), KvError> {
        if key.len() > self.bounds.max_key_bytes {
            return Err(KvError::KeyTooLong(self.bounds.max_key_bytes));
        }
        Ok(())
    }

    fn expiry(&self, now: Instant, ttl: Option<Duration>) -> Result<Option<Instant>, KvError> {
        let Some(ttl) = ttl else {
            return Ok(None);
        };
        let too_long = KvError::TtlTooLong(self.bounds.max_ttl.as_secs());
        if ttl > self.bounds.max_ttl {
            return Err(too_long);
        }
        now.checked_add(ttl).map(Some).ok_or(too_long)
    }

    /// Make sure `key` can hold an entry costing `cost`: drop expired entries when the store
    /// would be full (in keys or in bytes).
    fn make_room(
        &self,
        entries: &mut Entries,
        key: &str,
        cost_of_new: usize,
        now: Instant,
    ) -> Result<(), KvError> {
        let check = |entries: &Entries| {
            let old = entries.map.get(key).map(|e| cost(key, &e.value));
            if old.is_none() && entries.map.len() >= self.bounds.max_keys {
                return Err(KvError::Full(self.bounds.max_keys));
            }
            if entries.bytes - old.unwrap_or(0) + cost_of_new > self.bounds.max_total_bytes {
                return Err(KvError::FullBytes(self.bounds.max_total_bytes));
            }
            Ok(())
        };
        if check(entries).is_ok() {
            return Ok(());
        }
        entries.drop_expired(now);
        check(entries)
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
            ..Bounds::default()
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

    #[test]
    fn total_bytes_are_bounded_and_given_back() {
        let kv = KvStore::new(Bounds {
            max_total_bytes: 3 * (ENTRY_OVERHEAD + 101),
            ..Bounds::default()
        });
        let value = "x".repeat(100);
        for key in ["a", "b", "c"] {
            kv.set(key, value.clone(), None).unwrap();
        }
        assert_eq!(
            kv.set("d", value.clone(), None),
            Err(KvError::FullBytes(3 * (ENTRY_OVERHEAD + 101)))
        );
        // Replacing a value counts only the difference.
        assert_eq!(kv.set("a", value.clone(), None), Ok(()));
        assert!(kv.delete("b"));
        assert_eq!(kv.set("d", value.clone(), None), Ok(()));
        // Expired entries make room for bytes too.
        kv.set("b", "1".into(), Some(Duration::from_millis(1)))
            .unwrap_err();
        assert!(kv.delete("c"));
        kv.set("e", value.clone(), Some(Duration::from_millis(1)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(kv.set("f", value, None), Ok(()));
    }

    #[test]
    fn huge_ttls_are_refused_not_a_panic() {
        let kv = KvStore::default();
        let max = Bounds::default().max_ttl.as_secs();
        assert_eq!(
            kv.set("k", "1".into(), Some(Duration::from_millis(u64::MAX))),
            Err(KvError::TtlTooLong(max))
        );
        assert_eq!(
            kv.incr("n", 1, Some(Duration::from_millis(u64::MAX))),
            Err(KvError::TtlTooLong(max))
        );
        assert_eq!(kv.incr("n", 1, Some(Duration::from_secs(60))), Ok(1));
    }
}
