//! The store's operations and bounds: scenarios that every backend must pass, run here on the
//! SQLite backend (an in-memory database, and a file that a second store opens again) and in
//! [`redis`] on a real Redis server.

use super::*;

mod redis;

/// What every backend must do. Each takes a maker of empty stores under given bounds.
mod scenarios {
    use std::time::Duration;

    use super::*;

    pub(super) async fn set_get_delete_and_expiry(new: &dyn Fn(Bounds) -> KvStore) {
        let kv = new(Bounds::default());
        assert_eq!(kv.get("a").await, Ok(None));
        kv.set("a", "1".into(), None).await.unwrap();
        assert_eq!(kv.get("a").await.unwrap().as_deref(), Some("1"));
        assert_eq!(kv.delete("a").await, Ok(true));
        assert_eq!(kv.delete("a").await, Ok(false));
        kv.set("b", "\"x\"".into(), Some(Duration::from_millis(1)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(kv.get("b").await, Ok(None));
    }

    pub(super) async fn incr_counts_and_refuses_non_integers(new: &dyn Fn(Bounds) -> KvStore) {
        let kv = new(Bounds::default());
        assert_eq!(kv.incr("n", 1, None).await, Ok(1));
        assert_eq!(kv.incr("n", 5, None).await, Ok(6));
        kv.set("s", "\"text\"".into(), None).await.unwrap();
        assert_eq!(kv.incr("s", 1, None).await, Err(KvError::NotAnInteger));
        kv.set("big", i64::MAX.to_string(), None).await.unwrap();
        assert_eq!(kv.incr("big", 1, None).await, Err(KvError::Overflow));
    }

    pub(super) async fn bounds_are_enforced_and_expired_keys_make_room(
        new: &dyn Fn(Bounds) -> KvStore,
    ) {
        let kv = new(Bounds {
            max_keys: 2,
            max_key_bytes: 4,
            max_value_bytes: 8,
            ..Bounds::default()
        });
        assert_eq!(
            kv.set("toolong", "1".into(), None).await,
            Err(KvError::KeyTooLong(4))
        );
        assert_eq!(
            kv.set("k", "123456789".into(), None).await,
            Err(KvError::ValueTooLarge(8))
        );
        kv.set("a", "1".into(), Some(Duration::from_millis(1)))
            .await
            .unwrap();
        kv.set("b", "1".into(), None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Full, but "a" has expired: it makes room.
        assert_eq!(kv.set("c", "1".into(), None).await, Ok(()));
        assert_eq!(kv.set("d", "1".into(), None).await, Err(KvError::Full(2)));
        // Overwriting an existing key needs no room.
        assert_eq!(kv.set("b", "2".into(), None).await, Ok(()));
        // A write of several keys that does not fit writes none of them.
        assert_eq!(kv.delete("b").await, Ok(true));
        assert_eq!(
            kv.write(
                vec![
                    ("x".into(), Some("1".into())),
                    ("y".into(), Some("1".into()))
                ],
                None
            )
            .await,
            Err(KvError::Full(2))
        );
        assert_eq!(kv.get("x").await, Ok(None));
    }

    pub(super) async fn total_bytes_are_bounded_and_given_back(new: &dyn Fn(Bounds) -> KvStore) {
        let limit = 3 * (ENTRY_OVERHEAD + 101);
        let kv = new(Bounds {
            max_total_bytes: limit,
            ..Bounds::default()
        });
        let value = "x".repeat(100);
        for key in ["a", "b", "c"] {
            kv.set(key, value.clone(), None).await.unwrap();
        }
        assert_eq!(
            kv.set("d", value.clone(), None).await,
            Err(KvError::FullBytes(limit))
        );
        // Replacing a value counts only the difference.
        assert_eq!(kv.set("a", value.clone(), None).await, Ok(()));
        assert_eq!(kv.delete("b").await, Ok(true));
        assert_eq!(kv.set("d", value.clone(), None).await, Ok(()));
        assert_eq!(kv.delete("c").await, Ok(true));
        kv.set("e", value.clone(), Some(Duration::from_millis(1)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Expired entries make room for bytes too.
        assert_eq!(kv.set("f", value, None).await, Ok(()));
    }

    pub(super) async fn huge_ttls_are_refused_not_a_panic(new: &dyn Fn(Bounds) -> KvStore) {
        let kv = new(Bounds::default());
        let max = Bounds::default().max_ttl.as_secs();
        assert_eq!(
            kv.set("k", "1".into(), Some(Duration::from_millis(u64::MAX)))
                .await,
            Err(KvError::TtlTooLong(max))
        );
        assert_eq!(
            kv.incr("n", 1, Some(Duration::from_millis(u64::MAX))).await,
            Err(KvError::TtlTooLong(max))
        );
        assert_eq!(kv.incr("n", 1, Some(Duration::from_secs(60))).await, Ok(1));
    }

    pub(super) async fn compare_and_set_keys_and_write(new: &dyn Fn(Bounds) -> KvStore) {
        let kv = new(Bounds::default());
        // Absent: only `None` matches.
        assert_eq!(
            kv.compare_and_set("k", Some("1".into()), Some("2".into()), None)
                .await,
            Ok(false)
        );
        assert_eq!(
            kv.compare_and_set("k", None, Some("1".into()), None).await,
            Ok(true)
        );
        assert_eq!(
            kv.compare_and_set("k", None, Some("9".into()), None).await,
            Ok(false)
        );
        assert_eq!(
            kv.compare_and_set("k", Some("1".into()), Some("2".into()), None)
                .await,
            Ok(true)
        );
        assert_eq!(kv.get("k").await.unwrap().as_deref(), Some("2"));
        // A `None` value deletes.
        assert_eq!(
            kv.compare_and_set("k", Some("2".into()), None, None).await,
            Ok(true)
        );
        assert_eq!(kv.get("k").await, Ok(None));

        let entries = (0..25)
            .map(|i| (format!("user:{i:02}"), Some(i.to_string())))
            .chain([("users".to_string(), Some("0".to_string()))])
            .chain([("usez".to_string(), Some("0".to_string()))])
            .collect();
        kv.write(entries, None).await.unwrap();
        let first = kv.keys("user:", None, 10).await.unwrap();
        assert_eq!(first.len(), 10);
        assert_eq!(first[0], "user:00");
        let second = kv.keys("user:", first.last().cloned(), 10).await.unwrap();
        assert_eq!(second[0], "user:10");
        let third = kv.keys("user:", second.last().cloned(), 10).await.unwrap();
        assert_eq!(third.len(), 5);
        assert!(
            kv.keys("user:", third.last().cloned(), 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(kv.keys("", None, 1000).await.unwrap().len(), 27);
        // Deleting several at once.
        kv.write(vec![("users".into(), None), ("usez".into(), None)], None)
            .await
            .unwrap();
        assert_eq!(kv.keys("use", None, 100).await.unwrap().len(), 25);
        let too_many = (0..=MAX_BATCH).map(|i| (i.to_string(), None)).collect();
        assert_eq!(
            kv.write(too_many, None).await,
            Err(KvError::TooMany(MAX_BATCH + 1))
        );
    }

    pub(super) async fn incr_is_exact_and_keeps_the_ttl(new: &dyn Fn(Bounds) -> KvStore) {
        let kv = new(Bounds::default());
        // 64-bit integers, exactly (no detour through a double).
        kv.set("m", (i64::MAX - 1).to_string(), None).await.unwrap();
        assert_eq!(kv.incr("m", 1, None).await, Ok(i64::MAX));
        assert_eq!(
            kv.get("m").await.unwrap(),
            Some("9223372036854775807".to_string())
        );
        assert_eq!(kv.incr("min", i64::MIN, None).await, Ok(i64::MIN));
        assert_eq!(kv.incr("min", -1, None).await, Err(KvError::Overflow));
        assert_eq!(kv.incr("min", 0, None).await, Ok(i64::MIN));
        // What counts as an integer: what `str::parse::<i64>` takes, around ASCII space.
        for (stored, sum) in [(" 7 ", 8), ("+5", 6), ("007", 8), ("-0", 1), ("-007", -6)] {
            kv.set("i", stored.into(), None).await.unwrap();
            assert_eq!(kv.incr("i", 1, None).await, Ok(sum), "{stored:?} + 1");
        }
        for stored in [
            "1.0",
            "1e3",
            "\"3\"",
            "",
            "-",
            "99999999999999999999",
            "null",
        ] {
            kv.set("i", stored.into(), None).await.unwrap();
            assert_eq!(
                kv.incr("i", 1, None).await,
                Err(KvError::NotAnInteger),
                "{stored:?} + 1"
            );
            // A refused incr leaves the value as it was.
            assert_eq!(kv.get("i").await.unwrap().as_deref(), Some(stored));
        }
        // The ttl applies when the key is created; later calls keep it.
        let short = Duration::from_millis(300);
        assert_eq!(kv.incr("t", 1, Some(short)).await, Ok(1));
        assert_eq!(kv.incr("t", 1, None).await, Ok(2));
        assert_eq!(kv.incr("t", 1, Some(Duration::from_secs(60))).await, Ok(3));
        tokio::time::sleep(short + Duration::from_millis(100)).await;
        assert_eq!(kv.get("t").await, Ok(None));
        // Expired: it starts again from 0, without a ttl this time.
        assert_eq!(kv.incr("t", 1, None).await, Ok(1));
        tokio::time::sleep(short).await;
        assert_eq!(kv.get("t").await.unwrap().as_deref(), Some("1"));
    }

    pub(super) async fn expired_entries_are_absent_everywhere(new: &dyn Fn(Bounds) -> KvStore) {
        let kv = new(Bounds::default());
        let entries = ["k1", "k2", "k3"]
            .map(|k| (k.to_string(), Some(k[1..].to_string())))
            .to_vec();
        kv.write(entries, None).await.unwrap();
        kv.write(
            vec![("k2".into(), Some("x".into()))],
            Some(Duration::from_millis(1)),
        )
        .await
        .unwrap();
        kv.compare_and_set("c", None, Some("1".into()), Some(Duration::from_millis(1)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(kv.keys("k", None, 10).await.unwrap(), ["k1", "k3"]);
        assert_eq!(kv.keys("k", None, 1).await.unwrap(), ["k1"]);
        assert_eq!(kv.keys("k", Some("k1".into()), 1).await.unwrap(), ["k3"]);
        // `after` before the prefix starts at the prefix; past it, there is nothing.
        assert_eq!(
            kv.keys("k", Some("a".into()), 10).await.unwrap(),
            ["k1", "k3"]
        );
        assert!(kv.keys("k", Some("z".into()), 10).await.unwrap().is_empty());
        assert_eq!(kv.delete("k2").await, Ok(false));
        assert_eq!(kv.get("c").await, Ok(None));
        assert_eq!(
            kv.compare_and_set("c", Some("1".into()), Some("2".into()), None)
                .await,
            Ok(false)
        );
        assert_eq!(
            kv.compare_and_set("c", None, Some("2".into()), None).await,
            Ok(true)
        );
        // A `write` applies its entries in order, the last one for a key winning.
        kv.write(
            vec![
                ("d".into(), Some("1".into())),
                ("d".into(), None),
                ("e".into(), Some("1".into())),
                ("e".into(), Some("2".into())),
            ],
            None,
        )
        .await
        .unwrap();
        assert_eq!(kv.get("d").await, Ok(None));
        assert_eq!(kv.get("e").await.unwrap().as_deref(), Some("2"));
        // Byte order, whatever the locale: "B" < "a" < "az" < "a\u{e9}" (0xc3 0xa9).
        for key in ["a\u{e9}", "az", "B", "a"] {
            kv.set(key, "0".into(), None).await.unwrap();
        }
        assert_eq!(
            kv.keys("", None, 100).await.unwrap(),
            ["B", "a", "az", "a\u{e9}", "c", "e", "k1", "k3"]
        );
        assert_eq!(
            kv.keys("a", None, 100).await.unwrap(),
            ["a", "az", "a\u{e9}"]
        );
    }

    pub(super) async fn long_ttls_within_bounds_work(new: &dyn Fn(Bounds) -> KvStore) {
        let kv = new(Bounds {
            max_ttl: Duration::MAX,
            ..Bounds::default()
        });
        kv.set("k", "1".into(), Some(Duration::from_secs(u64::MAX / 2)))
            .await
            .unwrap();
        assert_eq!(kv.get("k").await.unwrap().as_deref(), Some("1"));
        assert_eq!(kv.incr("n", 1, Some(Duration::MAX)).await, Ok(1));
        assert_eq!(kv.incr("n", 1, Some(Duration::MAX)).await, Ok(2));
        assert_eq!(
            kv.compare_and_set("c", None, Some("1".into()), Some(Duration::MAX))
                .await,
            Ok(true)
        );
        assert_eq!(kv.keys("", None, 10).await.unwrap(), ["c", "k", "n"]);
    }
}

#[tokio::test]
async fn set_get_delete_and_expiry() {
    scenarios::set_get_delete_and_expiry(&KvStore::in_memory).await;
}

#[tokio::test]
async fn incr_counts_and_refuses_non_integers() {
    scenarios::incr_counts_and_refuses_non_integers(&KvStore::in_memory).await;
}

#[tokio::test]
async fn bounds_are_enforced_and_expired_keys_make_room() {
    scenarios::bounds_are_enforced_and_expired_keys_make_room(&KvStore::in_memory).await;
}

#[tokio::test]
async fn total_bytes_are_bounded_and_given_back() {
    scenarios::total_bytes_are_bounded_and_given_back(&KvStore::in_memory).await;
}

#[tokio::test]
async fn huge_ttls_are_refused_not_a_panic() {
    scenarios::huge_ttls_are_refused_not_a_panic(&KvStore::in_memory).await;
}

#[tokio::test]
async fn compare_and_set_keys_and_write() {
    scenarios::compare_and_set_keys_and_write(&KvStore::in_memory).await;
}

#[tokio::test]
async fn incr_is_exact_and_keeps_the_ttl() {
    scenarios::incr_is_exact_and_keeps_the_ttl(&KvStore::in_memory).await;
}

#[tokio::test]
async fn expired_entries_are_absent_everywhere() {
    scenarios::expired_entries_are_absent_everywhere(&KvStore::in_memory).await;
}

#[tokio::test]
async fn long_ttls_within_bounds_work() {
    scenarios::long_ttls_within_bounds_work(&KvStore::in_memory).await;
}

#[tokio::test]
async fn a_file_store_is_durable_and_shared() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite3");
    let first = KvStore::sqlite(&path, Bounds::default()).unwrap();
    first.set("greeting", "\"hi\"".into(), None).await.unwrap();
    assert_eq!(first.incr("n", 2, None).await, Ok(2));
    // Another store on the same file (a restart, or a second process) sees it all.
    let second = KvStore::sqlite(&path, Bounds::default()).unwrap();
    assert_eq!(
        second.get("greeting").await.unwrap().as_deref(),
        Some("\"hi\"")
    );
    assert_eq!(second.incr("n", 1, None).await, Ok(3));
    assert_eq!(first.incr("n", 1, None).await, Ok(4));
    drop(first);
    drop(second);
    let third = KvStore::sqlite(&path, Bounds::default()).unwrap();
    assert_eq!(third.get("n").await.unwrap().as_deref(), Some("4"));
}
