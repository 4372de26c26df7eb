//! Transactional enqueue (docs/stores/postgres.md, "Submitting inside your
//! transaction"): `SCHEMA.submit(…)` and `submit_in` write, in the caller's
//! transaction, the very task an rdq node writes — the canonical envelope
//! byte for byte, the row, the count, the wake-up — or nothing at all.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rdq_engine::store::admin::TaskCounts;
use rdq_engine::{Engine, ManualClock, QueuePolicy, SubmitRequest};
use rdq_envelope::{Envelope, TaskId, Timestamp};
use rdq_store_postgres::{PostgresStore, complete_in, submit_in};
use tokio_postgres::{AsyncMessage, Client, NoTls};

async fn client() -> Client {
    let (client, connection) = tokio_postgres::connect(&common::url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

fn request(queue: &str) -> SubmitRequest {
    SubmitRequest {
        queue: queue.into(),
        handler_ref: "emails.send".into(),
        payload: br#"{"to":"a@example.com"}"#.to_vec(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

/// The stored envelope bytes of task `id`.
async fn stored(db: &Client, schema: &str, id: TaskId) -> Option<Vec<u8>> {
    db.query_opt(
        &format!("SELECT envelope FROM {schema}.tasks WHERE id = $1"),
        &[&uuid::Uuid::from_u128(id.as_u128())],
    )
    .await
    .unwrap()
    .map(|row| row.get(0))
}

async fn rows(db: &Client, schema: &str) -> i64 {
    db.query_one(&format!("SELECT count(*) FROM {schema}.tasks"), &[])
        .await
        .unwrap()
        .get(0)
}

/// What an rdq node's submit stores for `req`, were it given the id and
/// the instant the SQL function chose.
fn node_envelope(req: &SubmitRequest, id: TaskId, at: Timestamp) -> Vec<u8> {
    let clock = Arc::new(ManualClock::new(at));
    let engine = Engine::new(Arc::new(rdq_store_memory::MemoryStore::new()), clock);
    let mut task = engine.build(req, &QueuePolicy::default()).unwrap();
    task.envelope.id = id;
    task.envelope.encode()
}

/// Submits `req` through SQL and checks the row against the node's envelope.
async fn submit_and_compare(db: &Client, schema: &str, req: &SubmitRequest) -> TaskId {
    let id = submit_in(db, schema, req).await.unwrap();
    let bytes = stored(db, schema, id).await.expect("the task is stored");
    let env = Envelope::decode(&bytes).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&bytes));
    });
    assert_eq!(env.encode(), bytes, "not canonical");
    assert_eq!(
        i64::try_from(id.timestamp_ms()).unwrap(),
        env.created_at.unix_ms(),
        "a ULID's first 48 bits are its creation's milliseconds"
    );
    assert_eq!(
        String::from_utf8(node_envelope(req, id, env.created_at)).unwrap(),
        String::from_utf8(bytes).unwrap(),
        "the SQL function and the codec disagree"
    );
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_submits_store_the_envelope_a_node_stores_byte_for_byte() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let db = client().await;
    let mut all_bytes = request("bytes");
    all_bytes.payload = (0..=255u8).collect();
    all_bytes.payload_content_type = "application/octet-stream".into();
    let mut headed = request("headed");
    headed.headers = BTreeMap::from([
        (
            "traceparent".into(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        ),
        ("Z-upper".into(), "sorted before lower-case".into()),
        (
            "a\"quote\\slash".into(),
            "line\nbreak\ttab\u{1}\u{7f} é ✓ 𝄞 /".into(),
        ),
        ("".into(), String::new()),
    ]);
    headed.handler_version = Some("2026.12 \"beta\"".into());
    headed.priority = 255;
    headed.delay_ms = 90_000;
    let mut keyed = request("flows");
    keyed.flow_key = Some("tenant:42/eu@x=y+z".into());
    keyed.idempotency_key = Some("order-1".into());
    let mut empty = request("empty");
    empty.payload = Vec::new();
    for req in [request("plain"), all_bytes, headed, keyed, empty] {
        submit_and_compare(&db, &schema, &req).await;
    }

    // Every valid fixture's submit fields (those a client may set).
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compliance/fixtures/valid");
    let mut compared = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let fixture = Envelope::decode(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap();
        if fixture
            .headers
            .keys()
            .any(|k| k.to_ascii_lowercase().starts_with("rdq."))
        {
            continue;
        }
        let mut req = SubmitRequest {
            queue: fixture.queue.clone(),
            handler_ref: fixture.handler_ref.clone(),
            handler_version: fixture.handler_version.clone(),
            payload: fixture.payload_bytes(),
            payload_content_type: fixture.payload_content_type.clone(),
            headers: fixture.headers.clone(),
            priority: fixture.priority,
            ..SubmitRequest::default()
        };
        if req.headers.values().any(|v| v.contains('\0')) {
            // PostgreSQL text holds no U+0000: refused up front, the rest compared.
            let err = submit_in(&db, &schema, &req).await.unwrap_err();
            assert_eq!(err.code(), "INVALID_FIELD", "{err}");
            for value in req.headers.values_mut() {
                *value = value.replace('\0', "");
            }
        }
        let node_refuses = Engine::new(
            Arc::new(rdq_store_memory::MemoryStore::new()),
            Arc::new(rdq_engine::SystemClock),
        )
        .build(&req, &QueuePolicy::default())
        .err();
        match node_refuses {
            // A node would refuse it too: so must SQL, with the same code.
            Some(refused) => {
                let err = submit_in(&db, &schema, &req).await.unwrap_err();
                assert_eq!(err.code(), refused.code(), "{err} / {refused}");
            }
            None => {
                submit_and_compare(&db, &schema, &req).await;
            }
        }
        compared += 1;
    }
    assert!(compared > 20, "only {compared} fixtures compared");

    // The rows are the rows a node writes: workers claim them, counts count them.
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(rdq_engine::SystemClock));
    let claimed = engine.claim("plain", 10, None).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let flows = engine.claim("flows", 10, None).await.unwrap();
    assert_eq!(
        flows[0].envelope.headers["rdq.flow_key"],
        "tenant:42/eu@x=y+z"
    );
    let counts = store.counts().await.unwrap();
    let headed = counts.iter().find(|c| c.queue == "headed").unwrap();
    assert_eq!(headed.pending, 1, "{headed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_task_id_text_is_the_codec_s_for_every_bit() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let db = client().await;
    // Each single bit, the extremes, and a spread of mixed values.
    let mut ids: Vec<u128> = (0..128).map(|bit| 1u128 << bit).collect();
    ids.extend([
        0,
        u128::MAX,
        u128::MAX >> 1,
        0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
    ]);
    let mut x = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834_u128;
    for _ in 0..500 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids.push(x);
    }
    for bits in ids {
        let row = db
            .query_one(
                &format!("SELECT {schema}.task_id_text($1), {schema}.task_id_uuid({schema}.task_id_text($1))"),
                &[&uuid::Uuid::from_u128(bits)],
            )
            .await
            .unwrap();
        let text: String = row.get(0);
        let back: uuid::Uuid = row.get(1);
        assert_eq!(text, TaskId::from_u128(bits).to_string(), "{bits:#034x}");
        assert_eq!(back.as_u128(), bits, "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_submit_never_exists_and_a_committed_one_wakes_workers() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let (listener, mut connection) = tokio_postgres::connect(&common::url(), NoTls)
        .await
        .unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    listener
        .batch_execute(&format!("LISTEN rdq_{schema}"))
        .await
        .unwrap();
    let mut db = client().await;
    let other = client().await;

    let tx = db.transaction().await.unwrap();
    let id = submit_in(&tx, &schema, &request("orders")).await.unwrap();
    assert!(
        stored(&other, &schema, id).await.is_none(),
        "seen before commit"
    );
    tx.rollback().await.unwrap();
    assert!(
        stored(&other, &schema, id).await.is_none(),
        "a rolled-back task exists"
    );
    assert_eq!(rows(&other, &schema).await, 0);
    let quiet = tokio::time::timeout(Duration::from_millis(300), notes.recv()).await;
    assert!(
        quiet.is_err(),
        "a rolled-back submit woke workers: {quiet:?}"
    );

    let tx = db.transaction().await.unwrap();
    tx.execute("SELECT 1", &[]).await.unwrap();
    let id = submit_in(&tx, &schema, &request("orders")).await.unwrap();
    tx.commit().await.unwrap();
    let note = tokio::time::timeout(Duration::from_secs(2), notes.recv())
        .await
        .expect("no wake-up within 2 s of the commit")
        .unwrap();
    assert_eq!(note, "w sql orders");
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(rdq_engine::SystemClock));
    let claimed = engine.claim("orders", 10, None).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].envelope.id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_with_one_idempotency_key_make_one_task() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let mut req = request("orders");
    req.idempotency_key = Some("order-7".into());

    for first_commits in [true, false] {
        let (mut a, mut b) = (client().await, client().await);
        let ta = a.transaction().await.unwrap();
        let first = submit_in(&ta, &schema, &req).await.unwrap();
        let (schema_b, req_b) = (schema.clone(), req.clone());
        let second = tokio::spawn(async move {
            let tb = b.transaction().await.unwrap();
            let id = submit_in(&tb, &schema_b, &req_b).await.unwrap();
            tb.commit().await.unwrap();
            id
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !second.is_finished(),
            "the second submit did not wait for the first"
        );
        if first_commits {
            ta.commit().await.unwrap();
            assert_eq!(second.await.unwrap(), first, "two tasks for one key");
        } else {
            ta.rollback().await.unwrap();
            let own = second.await.unwrap();
            assert_ne!(own, first, "the key went to a task that was rolled back");
        }
        let db = client().await;
        assert_eq!(rows(&db, &schema).await, 1);
        if first_commits {
            db.batch_execute(&format!("DELETE FROM {schema}.tasks"))
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_rdq_codes_and_writes_nothing() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let db = client().await;
    let bad: Vec<(&str, SubmitRequest)> = vec![
        (
            "INVALID_QUEUE_NAME",
            SubmitRequest {
                queue: "Orders".into(),
                ..request("x")
            },
        ),
        (
            "INVALID_QUEUE_NAME",
            SubmitRequest {
                queue: String::new(),
                ..request("x")
            },
        ),
        (
            "INVALID_QUEUE_NAME",
            SubmitRequest {
                queue: "..".into(),
                ..request("x")
            },
        ),
        (
            "INVALID_QUEUE_NAME",
            SubmitRequest {
                queue: "q".repeat(241),
                ..request("x")
            },
        ),
        (
            "INVALID_HANDLER_REF",
            SubmitRequest {
                handler_ref: "send email".into(),
                ..request("x")
            },
        ),
        (
            "RESERVED_HEADER",
            SubmitRequest {
                headers: BTreeMap::from([("RDQ.submitted_by".into(), "me".into())]),
                ..request("x")
            },
        ),
        (
            "INVALID_FIELD",
            SubmitRequest {
                payload_content_type: String::new(),
                ..request("x")
            },
        ),
        (
            "INVALID_FIELD",
            SubmitRequest {
                handler_version: Some("v".repeat(256)),
                ..request("x")
            },
        ),
        (
            "INVALID_FIELD",
            SubmitRequest {
                idempotency_key: Some(String::new()),
                ..request("x")
            },
        ),
        (
            "INVALID_FIELD",
            SubmitRequest {
                flow_key: Some("a b".into()),
                ..request("x")
            },
        ),
        (
            "INVALID_FIELD",
            SubmitRequest {
                flow_key: Some("k".repeat(129)),
                ..request("x")
            },
        ),
        (
            "INVALID_FIELD",
            SubmitRequest {
                delay_ms: u64::MAX,
                ..request("x")
            },
        ),
        (
            "PAYLOAD_TOO_LARGE",
            SubmitRequest {
                payload: vec![7; 1024 * 1024],
                ..request("x")
            },
        ),
    ];
    for (code, req) in &bad {
        let err = submit_in(&db, &schema, req).await.unwrap_err();
        assert_eq!(err.code(), *code, "{err}");
    }
    // What only SQL can get wrong: nulls and JSON that is not an object of strings.
    let raw = [
        ("INVALID_QUEUE_NAME", "NULL, 'h'"),
        ("INVALID_HANDLER_REF", "'q', NULL"),
        ("INVALID_FIELD: payload", "'q', 'h', NULL"),
        (
            "INVALID_FIELD: payload_content_type",
            "'q', 'h', '\\x00', NULL",
        ),
        ("INVALID_FIELD: headers:", "'q', 'h', headers => '[1]'"),
        (
            "INVALID_FIELD: headers.n",
            "'q', 'h', headers => '{\"n\": 1}'",
        ),
        ("INVALID_FIELD: priority", "'q', 'h', priority => 256"),
        ("INVALID_FIELD: priority", "'q', 'h', priority => -1"),
        ("INVALID_FIELD: delay_ms", "'q', 'h', delay_ms => -1"),
    ];
    for (code, args) in raw {
        let err = db
            .query_one(&format!("SELECT {schema}.submit({args})"), &[])
            .await
            .unwrap_err();
        let db_err = err.as_db_error().unwrap();
        assert_eq!(db_err.code().code(), "22023", "{args}: {db_err:?}");
        assert!(
            db_err.message().starts_with(code),
            "{args}: {}",
            db_err.message()
        );
    }
    // A queue's own limit applies.
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(rdq_engine::SystemClock));
    engine
        .set_policy(
            "small",
            &QueuePolicy {
                max_envelope_bytes: 600,
                ..QueuePolicy::default()
            },
        )
        .await
        .unwrap();
    let mut big = request("small");
    big.payload = vec![b'x'; 400];
    let err = submit_in(&db, &schema, &big).await.unwrap_err();
    assert_eq!(err.code(), "PAYLOAD_TOO_LARGE", "{err}");
    big.idempotency_key = Some("too-big".into());
    let err = submit_in(&db, &schema, &big).await.unwrap_err();
    assert_eq!(err.code(), "PAYLOAD_TOO_LARGE", "{err}");
    big.idempotency_key = None;
    big.payload.truncate(100);
    submit_in(&db, &schema, &big).await.unwrap();
    assert_eq!(rows(&db, &schema).await, 1, "a refused submit wrote a row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_inside_the_transaction_commits_with_it_and_is_fenced() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let key = rdq_engine::LeaseKey::of(&store).await.unwrap();
    let mut db = client().await;
    db.batch_execute(&format!("CREATE TABLE {schema}.sent (task text)"))
        .await
        .unwrap();
    let id = submit_in(&db, &schema, &request("emails")).await.unwrap();
    // Due at the database's clock; the engine's starts just after it.
    let clock = Arc::new(ManualClock::new(Timestamp::now().plus_ms(10)));
    let engine = Engine::new(Arc::new(store.clone()), clock.clone());
    let first = engine
        .claim("emails", 1, Some(60_000))
        .await
        .unwrap()
        .remove(0);
    let token = key.format(id, first.token);

    // The handler's write and the complete go together, or neither does.
    let tx = db.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {schema}.sent VALUES ($1)"),
        &[&id.to_string()],
    )
    .await
    .unwrap();
    complete_in(&tx, &schema, id, &token).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        engine.get(id).await.unwrap().status,
        rdq_envelope::Status::InFlight
    );

    // Refusals: malformed, forged, unknown.
    let refused = [
        (complete_in(&db, &schema, id, "7").await, "INVALID_FIELD"),
        (
            complete_in(
                &db,
                &schema,
                id,
                &format!("{}.{}", first.token.0, "0".repeat(32)),
            )
            .await,
            "LEASE_LOST",
        ),
        (
            complete_in(
                &db,
                &schema,
                TaskId::generate(),
                &key.format(TaskId::generate(), first.token),
            )
            .await,
            "LEASE_LOST",
        ),
    ];
    for (result, code) in refused {
        assert_eq!(result.unwrap_err().code(), code);
    }
    let stranger = TaskId::generate();
    let err = complete_in(&db, &schema, stranger, &key.format(stranger, first.token))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "TASK_NOT_FOUND");
    let err = db
        .execute(
            &format!("SELECT {schema}.complete('not-an-id', $1)"),
            &[&token],
        )
        .await
        .unwrap_err();
    assert!(
        err.as_db_error()
            .unwrap()
            .message()
            .starts_with("INVALID_FIELD: id")
    );

    // The lease lapses and another worker claims the task: the first
    // worker's transaction cannot complete it.
    clock.advance_ms(61_000);
    engine.reap_expired(10).await.unwrap();
    clock.advance_ms(5_000); // the retry's backoff
    let second = engine
        .claim("emails", 1, Some(60_000))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(second.envelope.id, id);
    let tx = db.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {schema}.sent VALUES ($1)"),
        &[&id.to_string()],
    )
    .await
    .unwrap();
    let err = complete_in(&tx, &schema, id, &token).await.unwrap_err();
    assert_eq!(err.code(), "LEASE_LOST");
    tx.rollback().await.unwrap();

    // The current holder's complete commits with its write.
    let tx = db.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {schema}.sent VALUES ($1)"),
        &[&id.to_string()],
    )
    .await
    .unwrap();
    complete_in(&tx, &schema, id, &key.format(id, second.token))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let sent: i64 = db
        .query_one(&format!("SELECT count(*) FROM {schema}.sent"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(sent, 1);

    // Read back: the SUCCEEDED envelope a settle would have written.
    let done = engine.get(id).await.unwrap();
    assert_eq!(done.status, rdq_envelope::Status::Succeeded);
    let finished = done.attempts.last().unwrap().finished_at.unwrap();
    let expected =
        rdq_engine::machine::replay_success(second.envelope.clone(), finished.unix_ms()).unwrap();
    assert_eq!(done.encode(), expected.encode());
    assert_eq!(done.attempts.len(), 2);
    let counts = store.counts().await.unwrap();
    let emails = counts.iter().find(|c| c.queue == "emails").unwrap();
    assert_eq!((emails.in_flight, emails.succeeded), (0, 1), "{emails:?}");
    // Settled once: the worker's own settle now finds its lease gone.
    let late = engine
        .settle(
            &second.envelope,
            second.token,
            rdq_engine::Settlement::Success,
        )
        .await
        .unwrap_err();
    assert_eq!(late.code(), "LEASE_LOST");
}
