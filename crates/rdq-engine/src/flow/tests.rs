use serde_json::json;

use super::*;
use crate::QueuePolicy;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(ms).unwrap()
}

fn task(key: &str, n: u128) -> Candidate {
    Candidate {
        key: key.into(),
        priority: 0,
        due: None,
        id: TaskId::from_u128(n),
    }
}

fn policy(doc: serde_json::Value) -> FlowPolicy {
    QueuePolicy::from_json(json!({ "flow": doc })).unwrap().flow
}

#[test]
fn an_empty_section_limits_nothing_and_writes_nothing() {
    let flow = policy(json!({}));
    assert!(flow.is_unlimited() && !flow.needs_ledger());
    assert_eq!(serde_json::to_value(&flow).unwrap(), json!({}));
    let full = policy(json!({"rate": {"per_second": 2.5}, "key_concurrency": 3,
        "fairness": "weighted", "weights": {"acme": 3}}));
    assert!(full.needs_ledger());
    assert_eq!(full.rate.as_ref().unwrap().burst(), 3.0);
    assert_eq!(full.weight("acme"), 3);
    assert_eq!(full.weight("other"), 1);
    let back: FlowPolicy = serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
    assert_eq!(back, full);
    assert!(policy(json!({"concurrency": 4})).needs_ledger());
    assert!(!policy(json!({"local_concurrency": 2})).needs_ledger());
}

#[test]
fn bad_flow_values_are_refused_naming_the_field() {
    for (doc, field) in [
        (json!({"rate": {"per_second": 0}}), "flow.rate.per_second"),
        (json!({"rate": {"per_second": -1}}), "flow.rate.per_second"),
        (json!({"rate": {"per_second": 2e6}}), "flow.rate.per_second"),
        (
            json!({"rate": {"per_second": 1, "burst": 0}}),
            "flow.rate.burst",
        ),
        (
            json!({"key_rate": {"per_second": 1, "burst": 2_000_000}}),
            "flow.key_rate.burst",
        ),
        (json!({"concurrency": 0}), "flow.concurrency"),
        (
            json!({"key_concurrency": 2_000_000}),
            "flow.key_concurrency",
        ),
        (json!({"local_concurrency": -1}), "local_concurrency"),
        (
            json!({"fairness": "weighted", "weights": {"bad key": 2}}),
            "flow.weights.bad key",
        ),
        (
            json!({"fairness": "weighted", "weights": {"a": 0}}),
            "flow.weights.a",
        ),
        (
            json!({"fairness": "weighted", "default_weight": 5000}),
            "flow.default_weight",
        ),
        (json!({"weights": {"a": 2}}), "flow.weights"),
        (json!({"fairness": "round_robin"}), "round_robin"),
        (json!({"ratee": 1}), "ratee"),
        (json!({"rate": {"per_second": 1, "brust": 2}}), "brust"),
    ] {
        let err = QueuePolicy::from_json(json!({ "flow": doc })).unwrap_err();
        assert_eq!(err.code(), "INVALID_POLICY", "{doc}");
        assert!(err.to_string().contains(field), "{err} should name {field}");
    }
}

#[test]
fn flow_keys_are_checked() {
    assert!(validate_flow_key("tenant-42").is_ok());
    assert!(validate_flow_key("acme.com/api:v2@eu=1+x_y").is_ok());
    for bad in ["", "has space", "é", &"k".repeat(129), "new\nline"] {
        let err = validate_flow_key(bad).unwrap_err();
        assert_eq!(err.code(), "INVALID_FIELD");
        assert!(err.to_string().contains("flow_key"), "{err}");
    }
    assert!(validate_flow_key(&"k".repeat(128)).is_ok());
}

#[test]
fn per_key_concurrency_counts_what_is_in_flight_and_what_this_claim_takes() {
    let flow = policy(json!({"key_concurrency": 2}));
    let mut ledger = FlowLedger::default();
    let mut in_flight = HashMap::new();
    in_flight.insert("a".to_owned(), 1);
    let cands = vec![
        task("a", 1),
        task("a", 2),
        task("a", 3),
        task("b", 4),
        task("b", 5),
        task("b", 6),
    ];
    let got = ledger.select(&flow, at(0), &in_flight, cands, 10);
    assert_eq!(
        got,
        vec![
            TaskId::from_u128(1),
            TaskId::from_u128(4),
            TaskId::from_u128(5)
        ]
    );
}

#[test]
fn the_rate_holds_to_burst_plus_rate_times_elapsed() {
    let flow = policy(json!({"rate": {"per_second": 10, "burst": 5}}));
    let mut ledger = FlowLedger::default();
    let none = HashMap::new();
    let many = |from: u128| (from..from + 100).map(|n| task("", n)).collect::<Vec<_>>();
    assert_eq!(ledger.select(&flow, at(0), &none, many(0), 100).len(), 5);
    assert_eq!(
        ledger.throttled_claims, 1,
        "the first claim was cut to the burst"
    );
    assert_eq!(ledger.select(&flow, at(0), &none, many(100), 100).len(), 0);
    assert_eq!(ledger.throttled_claims, 2);
    // 10/s: a token every 100 ms.
    assert_eq!(
        ledger.select(&flow, at(250), &none, many(200), 100).len(),
        2
    );
    assert_eq!(
        ledger.select(&flow, at(300), &none, many(300), 100).len(),
        1
    );
    // A long idle spell refills to the burst, no more.
    assert_eq!(
        ledger
            .select(&flow, at(60_000), &none, many(400), 100)
            .len(),
        5
    );
    // A lowered burst applies at once.
    let lower = policy(json!({"rate": {"per_second": 10, "burst": 1}}));
    assert_eq!(
        ledger
            .select(&lower, at(120_000), &none, many(500), 100)
            .len(),
        1
    );
}

#[test]
fn a_key_rate_limits_each_key_alone() {
    let flow = policy(json!({"key_rate": {"per_second": 1, "burst": 2}}));
    let mut ledger = FlowLedger::default();
    let none = HashMap::new();
    let cands = (0..10)
        .map(|n| task(if n < 5 { "a" } else { "b" }, n))
        .collect();
    assert_eq!(ledger.select(&flow, at(0), &none, cands, 100).len(), 4);
    let cands = (10..20).map(|n| task("a", n)).collect();
    assert_eq!(ledger.select(&flow, at(500), &none, cands, 100).len(), 0);
    let cands = (20..30).map(|n| task("a", n)).collect();
    assert_eq!(ledger.select(&flow, at(1_000), &none, cands, 100).len(), 1);
}

#[test]
fn weighted_fairness_serves_a_quiet_key_within_one_round() {
    let flow = policy(json!({"fairness": "weighted"}));
    let mut ledger = FlowLedger::default();
    let none = HashMap::new();
    // The loud key has been served for a while before the quiet one arrives.
    for round in 0..50u128 {
        let cands = (0..4).map(|n| task("loud", round * 4 + n)).collect();
        ledger.select(&flow, at(0), &none, cands, 4);
    }
    let mut cands: Vec<Candidate> = (1000..1100).map(|n| task("loud", n)).collect();
    cands.push(task("quiet", 5000));
    let got = ledger.select(&flow, at(0), &none, cands, 2);
    assert!(got.contains(&TaskId::from_u128(5000)), "{got:?}");
}

#[test]
fn weights_share_starts_in_proportion() {
    let flow = policy(json!({"fairness": "weighted", "weights": {"gold": 3}}));
    let mut ledger = FlowLedger::default();
    let none = HashMap::new();
    let mut cands: Vec<Candidate> = (0..100).map(|n| task("gold", n)).collect();
    cands.extend((100..200).map(|n| task("tin", n)));
    let got = ledger.select(&flow, at(0), &none, cands, 40);
    let gold = got.iter().filter(|id| id.as_u128() < 100).count();
    assert_eq!(gold, 30, "{got:?}");
}

#[test]
fn priority_comes_before_fairness_and_claim_order_within_a_key() {
    let flow = policy(json!({"fairness": "weighted"}));
    let mut ledger = FlowLedger::default();
    let mut urgent = task("a", 9);
    urgent.priority = 5;
    let late = Candidate {
        due: Some(at(10)),
        ..task("b", 1)
    };
    let early = Candidate {
        due: Some(at(5)),
        ..task("b", 2)
    };
    let got = ledger.select(
        &flow,
        at(100),
        &HashMap::new(),
        vec![late, early, urgent, task("a", 3)],
        4,
    );
    assert_eq!(got[0], TaskId::from_u128(9));
    let b: Vec<_> = got
        .iter()
        .filter(|id| [1, 2].contains(&id.as_u128()))
        .collect();
    assert_eq!(b, vec![&TaskId::from_u128(2), &TaskId::from_u128(1)]);
}

#[test]
fn a_throttle_passes_over_its_key_or_queue_until_its_time() {
    let flow = policy(json!({"fairness": "weighted"}));
    let mut ledger = FlowLedger::default();
    let none = HashMap::new();
    ledger.throttle(Some("a"), at(1_000));
    ledger.throttle(Some("a"), at(500));
    let cands = || vec![task("a", 1), task("b", 2)];
    assert_eq!(
        ledger.select(&flow, at(999), &none, cands(), 5),
        vec![TaskId::from_u128(2)]
    );
    assert_eq!(ledger.select(&flow, at(1_000), &none, cands(), 5).len(), 2);
    ledger.throttle(None, at(2_000));
    assert!(
        ledger
            .select(&flow, at(1_500), &none, cands(), 5)
            .is_empty()
    );
    let status = ledger.status(&flow, at(1_500), &none);
    assert_eq!(status.blocked_until, Some(at(2_000)));
    assert_eq!(ledger.select(&flow, at(2_000), &none, cands(), 5).len(), 2);
}

#[test]
fn status_lists_the_busiest_keys_and_tokens_left() {
    let flow =
        policy(json!({"rate": {"per_second": 1, "burst": 3}, "key_rate": {"per_second": 1}}));
    let mut ledger = FlowLedger::default();
    let none = HashMap::new();
    ledger.select(&flow, at(0), &none, vec![task("a", 1)], 5);
    let mut in_flight = HashMap::new();
    in_flight.insert("a".to_owned(), 1);
    for n in 0..30u64 {
        in_flight.insert(format!("k{n}"), n % 3);
    }
    let status = ledger.status(&flow, at(0), &in_flight);
    assert_eq!(status.tokens, Some(2.0));
    assert_eq!(status.keys.len(), STATUS_KEYS);
    assert_eq!(status.keys[0].in_flight, 2);
    let a = status.keys.iter().find(|k| k.key == "a").unwrap();
    assert_eq!(a.tokens, Some(0.0));
    let doc = serde_json::to_string(&ledger).unwrap();
    let back: FlowLedger = serde_json::from_str(&doc).unwrap();
    assert_eq!(back, ledger);
}
