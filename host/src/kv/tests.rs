//! The store's operations and bounds, on the SQLite backend (an in-memory database, and a file
//! that a second store opens again).

use std::time::Duration;

use super::*;

#[tokio::test]
async fn set_get_delete_and_expiry() {
    let kv = KvStore::default();
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

#[tokio::test]
async fn incr_counts_and_refuses_non_integers() {
    let kv = KvStore::default();
    assert_eq!(kv.incr("n", 1, None).await, Ok(1));
    assert_eq!(kv.incr("n", 5, None).await, Ok(6));
    kv.set("s", "\"text\"".into(), None).await.unwrap();
    assert_eq!(kv.incr("s", 1, None).await, Err(KvError::NotAnInteger));
    kv.set("big", i64::MAX.to_string(), None).await.unwrap();
    assert_eq!(kv.incr("big", 1, None).await, Err(KvError::Overflow));
}

#[tokio::test]
async fn bounds_are_enforced_and_expired_keys_make_room() {
    let kv = KvStore::in_memory(Bounds {
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

#[tokio::test]
async fn total_bytes_are_bounded_and_given_back() {
    let limit = 3 * (ENTRY_OVERHEAD + 101);
    let kv = KvStore::in_memory(Bounds {
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

#[tokio::test]
async fn huge_ttls_are_refused_not_a_panic() {
    let kv = KvStore::default();
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

#[tokio::test]
async fn compare_and_set_keys_and_write() {
    let kv = KvStore::default();
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
