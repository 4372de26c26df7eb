//! A fire's idempotency key and reserved headers.

use rdq_schedule::{
    BACKFILLED_HEADER, Fire, MAX_IDEMPOTENCY_KEY_LEN, SCHEDULE_DUE_HEADER, SCHEDULE_HEADER,
    fire_headers, idempotency_key,
};

use crate::ms;

#[test]
fn the_key_names_the_schedule_and_the_due_time() {
    assert_eq!(
        idempotency_key("nightly.report", 1_767_225_600_000),
        "rdq.schedule:nightly.report:1767225600000"
    );
}

#[test]
fn every_key_fits_the_idempotency_key_limit() {
    for len in [1, 200, 226, 227, 240] {
        let name = "a".repeat(len);
        for due in [-62_167_219_200_000, 0, 253_402_300_799_999] {
            let key = idempotency_key(&name, due);
            assert!(key.len() <= MAX_IDEMPOTENCY_KEY_LEN, "{len}: {}", key.len());
        }
    }
    assert_eq!(
        idempotency_key(&"a".repeat(226), -62_167_219_200_000).len(),
        MAX_IDEMPOTENCY_KEY_LEN
    );
}

#[test]
fn a_long_name_is_hashed_in_its_key_and_stays_distinct() {
    let a = format!("{}a", "x".repeat(239));
    let b = format!("{}b", "x".repeat(239));
    let (ka, kb) = (idempotency_key(&a, 5), idempotency_key(&b, 5));
    assert_ne!(ka, kb);
    assert!(
        ka.starts_with(&format!("rdq.schedule:{}~", "x".repeat(128))),
        "{ka}"
    );
    assert!(ka.ends_with(":5"));
    assert_eq!(ka, idempotency_key(&a, 5), "the key is deterministic");
}

#[test]
fn the_headers_carry_the_name_and_the_logical_due_time() {
    let due = ms("2026-03-08T07:00:00.250Z");
    let h = fire_headers(
        "nightly.report",
        &Fire {
            due_ms: due,
            backfilled: false,
        },
    );
    assert_eq!(h.len(), 2);
    assert_eq!(h[SCHEDULE_HEADER], "nightly.report");
    assert_eq!(h[SCHEDULE_DUE_HEADER], "2026-03-08T07:00:00.250Z");
    assert!(!h.contains_key(BACKFILLED_HEADER));
}

#[test]
fn a_backfilled_fire_says_so() {
    let h = fire_headers(
        "n",
        &Fire {
            due_ms: 0,
            backfilled: true,
        },
    );
    assert_eq!(h[BACKFILLED_HEADER], "true");
    assert_eq!(h[SCHEDULE_DUE_HEADER], "1970-01-01T00:00:00.000Z");
}
