//! The server's end-to-end suite on every store: the real `rdq serve`
//! binary over the embedded store, PostgreSQL, RabbitMQ and Redis, driven by
//! the typed Rust client (`rdq_client`). The same checks run on each store,
//! like the compliance kit at the storage SPI; what a store declares it
//! cannot do (`GET /v1/capabilities`) must answer `UNSUPPORTED` instead.
//!
//! Each test works in its own schema, namespace or key prefix and removes
//! it afterwards, so the suite runs in parallel with everything else.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{FAST_CONFIG, RdqServer, Receiver};
use rdq_api::dlq::{PageQuery, RedriveBody};
use rdq_api::tasks::{CancelBody, SubmitBody, TaskPageQuery};
use rdq_api::work::{ReportedError, ReportedOutcome, SettleBody};
use rdq_client::{Client, ClientError};
use rdq_envelope::{Envelope, Outcome, Status};
use serde_json::{Value, json};

/// One store the suite runs on: how to name it for `--store`, and how to
/// clean up after.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Embedded,
    Postgres,
    Rabbit,
    Redis,
}

struct Site {
    kind: Kind,
    spec: String,
    tag: String,
    _dir: tempfile::TempDir,
    server: Option<RdqServer>,
    client: Client,
    caps: BTreeMap<String, bool>,
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "e2e{}x{}x{}",
        std::process::id(),
        nanos % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl Site {
    async fn start(kind: Kind) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tag = unique();
        let spec = match kind {
            Kind::Embedded => dir.path().join("data").to_str().unwrap().to_owned(),
            Kind::Postgres => common::postgres_store(&tag),
            Kind::Rabbit => format!(
                "{}?namespace={tag}.",
                std::env::var("RDQ_AMQP_URL")
                    .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
            ),
            Kind::Redis => common::redis_store(&tag),
        };
        let server = RdqServer::start_on(dir.path(), FAST_CONFIG, &spec, &[]);
        let client = Client::new(&server.base, None).unwrap();
        let caps = client.capabilities().await.unwrap().capabilities;
        Self {
            kind,
            spec,
            tag,
            _dir: dir,
            server: Some(server),
            client,
            caps,
        }
    }

    fn can(&self, capability: &str) -> bool {
        self.caps.get(capability).copied().unwrap_or(false)
    }

    fn queue(&self, name: &str) -> String {
        format!("{name}.{}", self.tag)
    }

    async fn submit(&self, queue: &str, payload: Value) -> Envelope {
        let body = SubmitBody {
            queue: queue.to_owned(),
            handler_ref: "h".into(),
            payload_json: Some(serde_json::value::to_raw_value(&payload).unwrap()),
            ..Default::default()
        };
        let (created, env) = self.client.submit(&body).await.unwrap();
        assert!(created);
        env
    }

    async fn set_config(&self, queue: &str, patch: Value) {
        self.client.set_queue_config(queue, &patch).await.unwrap();
    }

    /// Claims until `n` tasks came or the deadline passed.
    async fn claim(
        &self,
        queue: &str,
        n: usize,
        lease_ms: Option<u64>,
    ) -> Vec<rdq_client::ClaimedTask> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < deadline {
            let mut batch = self
                .client
                .claim(queue, n - got.len(), lease_ms)
                .await
                .unwrap();
            if batch.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            got.append(&mut batch);
        }
        got
    }

    async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.terminate();
        }
        clean(self.kind, &self.spec, &self.tag);
    }
}

/// Removes what a test left in a shared service.
fn clean(kind: Kind, spec: &str, tag: &str) {
    let run = |cmd: &str, args: &[&str]| {
        let _ = std::process::Command::new(cmd).args(args).output();
    };
    match kind {
        Kind::Embedded => {}
        Kind::Postgres => common::drop_postgres_schema(tag),
        Kind::Rabbit => {
            let out = std::process::Command::new("rabbitmqctl")
                .args(["list_queues", "-q", "name"])
                .output();
            if let Ok(out) = out {
                for name in String::from_utf8_lossy(&out.stdout).lines() {
                    if name.starts_with(tag) {
                        run("rabbitmqctl", &["delete_queue", name.trim()]);
                    }
                }
            }
        }
        Kind::Redis => {
            let _ = spec;
            let out = std::process::Command::new("redis-cli")
                .args([
                    "-h",
                    "127.0.0.1",
                    "--scan",
                    "--pattern",
                    &format!("*{tag}*"),
                ])
                .output();
            if let Ok(out) = out {
                let keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect();
                for chunk in keys.chunks(200) {
                    let mut args = vec!["-h".to_owned(), "127.0.0.1".to_owned(), "DEL".to_owned()];
                    args.extend(chunk.iter().cloned());
                    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                    run("redis-cli", &refs);
                }
            }
        }
    }
}

fn settle(token: &str, outcome: ReportedOutcome, error: Option<&str>) -> SettleBody {
    SettleBody {
        id: None,
        lease_token: token.to_owned(),
        outcome,
        error: error.map(|t| ReportedError {
            error_type: t.to_owned(),
            message: "it failed".into(),
            detail: None,
            stack: None,
        }),
        defer_ms: None,
        throttle: None,
    }
}

fn assert_code<T: std::fmt::Debug>(r: Result<T, ClientError>, status: u16, code: &str) {
    let e = r.expect_err("expected a refusal");
    assert_eq!((e.status, e.code.as_str()), (Some(status), code), "{e:?}");
}

/// Pull workers: claim, settle one, settle a batch, extend, a stale token
/// and a token of another task refused with 409 LEASE_LOST.
async fn pull_workers_claim_settle_and_extend(kind: Kind) {
    let site = Site::start(kind).await;
    let q = site.queue("pull");
    for i in 0..4 {
        site.submit(&q, json!({"n": i})).await;
    }
    let claimed = site.claim(&q, 4, None).await;
    assert_eq!(claimed.len(), 4);
    assert!(
        claimed
            .iter()
            .all(|c| c.envelope.status == Status::InFlight)
    );
    let (a, b, c, d) = (&claimed[0], &claimed[1], &claimed[2], &claimed[3]);
    let done = site
        .client
        .settle(
            a.envelope.id,
            &settle(&a.lease_token, ReportedOutcome::Success, None),
        )
        .await
        .unwrap();
    assert_eq!(done.status, Status::Succeeded);
    // The same lease twice: the second is stale.
    assert_code(
        site.client
            .settle(
                a.envelope.id,
                &settle(&a.lease_token, ReportedOutcome::Success, None),
            )
            .await,
        409,
        "LEASE_LOST",
    );
    // Another task's token.
    assert_code(
        site.client
            .settle(
                b.envelope.id,
                &settle(&c.lease_token, ReportedOutcome::Success, None),
            )
            .await,
        409,
        "LEASE_LOST",
    );
    let extended = site
        .client
        .extend_lease(b.envelope.id, &b.lease_token, 60_000)
        .await
        .unwrap();
    assert!(extended.lease_expires_at > b.envelope.lease_expires_at);
    let mut items = Vec::new();
    for (t, outcome, error) in [
        (b, ReportedOutcome::Success, None),
        (c, ReportedOutcome::PermanentFailure, Some("e2e.Bad")),
        (d, ReportedOutcome::RetryableFailure, Some("e2e.Flaky")),
    ] {
        let mut s = settle(&t.lease_token, outcome, error);
        s.id = Some(t.envelope.id.to_string());
        items.push(s);
    }
    let mut stale = settle(&a.lease_token, ReportedOutcome::Success, None);
    stale.id = Some(a.envelope.id.to_string());
    items.push(stale);
    let results = site.client.settle_batch(&items).await.unwrap();
    assert_eq!(results[0].as_ref().unwrap().status, Status::Succeeded);
    assert_eq!(results[1].as_ref().unwrap().status, Status::Dead);
    let retried = results[2].as_ref().unwrap();
    assert_eq!(retried.status, Status::Pending);
    assert_eq!(retried.attempt_count, 1);
    assert_eq!(results[3].as_ref().unwrap_err().code, "LEASE_LOST");
    site.stop().await;
}

/// A lease that lapses is closed as LEASE_EXPIRED and the task comes back.
async fn a_lapsed_lease_comes_back_as_lease_expired(kind: Kind) {
    let site = Site::start(kind).await;
    let q = site.queue("lapse");
    site.set_config(&q, json!({"max_attempts": 5})).await;
    let sent = site.submit(&q, json!({"x": 1})).await;
    let first = site.claim(&q, 1, Some(300)).await;
    assert_eq!(first.len(), 1);
    let again = site.claim(&q, 1, Some(30_000)).await;
    assert_eq!(again.len(), 1, "the task came back after its lease lapsed");
    let env = &again[0].envelope;
    assert_eq!(env.id, sent.id);
    assert_eq!(env.attempts[0].outcome, Some(Outcome::LeaseExpired));
    assert_eq!(
        env.attempts[0]
            .error
            .as_ref()
            .map(|e| e.error_type.as_str()),
        Some("rdq.LeaseExpired")
    );
    // The first worker's token is fenced.
    assert_code(
        site.client
            .settle(
                env.id,
                &settle(&first[0].lease_token, ReportedOutcome::Success, None),
            )
            .await,
        409,
        "LEASE_LOST",
    );
    site.client
        .settle(
            env.id,
            &settle(&again[0].lease_token, ReportedOutcome::Success, None),
        )
        .await
        .unwrap();
    site.stop().await;
}

/// Poison: tasks whose handler kills its worker. Each worker is a process
/// that claims up to ten tasks and dies with SIGKILL before settling any;
/// workers keep coming until every task is DEAD. With `max_lease_expiries`
/// 2 and `max_attempts` 100, all 100 tasks reach the DLQ through their
/// lapsed leases, with the reason `LEASE_EXPIRIES_EXHAUSTED` and two
/// `LEASE_EXPIRED` attempts each; none runs a third time.
async fn poison_tasks_that_kill_their_worker_reach_the_dlq_by_lease_expiry(kind: Kind) {
    const TASKS: usize = 100;
    let site = Site::start(kind).await;
    let q = site.queue("poison");
    let policy = json!({"max_attempts": 100, "max_lease_expiries": 2, "lease_ms": 300});
    if let Err(e) = site.client.set_queue_config(&q, &policy).await {
        // A store without a lease-expiry budget says so.
        assert_eq!(e.code, "UNSUPPORTED", "{e:?}");
        site.stop().await;
        return;
    }
    let mut ids = Vec::with_capacity(TASKS);
    for n in 0..TASKS {
        ids.push(site.submit(&q, json!({"poison": n})).await.id);
    }
    let base = site.server.as_ref().unwrap().base.clone();
    let claim = format!("{base}/v1/queues/{q}/claim");
    let mut workers = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let dead = site
            .client
            .dlq_reasons(&q)
            .await
            .unwrap()
            .reasons
            .iter()
            .map(|r| r.count)
            .sum::<u64>();
        if dead as usize == TASKS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{dead} of {TASKS} poison tasks dead after {workers} workers died"
        );
        // A worker: claims, starts its handlers, and dies with them.
        let status = std::process::Command::new("sh")
            .args([
                "-c",
                r#"curl -s -o /dev/null -X POST -H 'content-type: application/json' -d '{"max": 10}' "$1"; kill -9 $$"#,
                "poison-worker",
                &claim,
            ])
            .status()
            .unwrap();
        assert!(!status.success(), "the worker died by its own hand");
        workers += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reasons = site.client.dlq_reasons(&q).await.unwrap().reasons;
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert_eq!(reasons[0].reason, "LEASE_EXPIRIES_EXHAUSTED");
    assert_eq!(reasons[0].count, TASKS as u64);
    for id in &ids {
        // Found by queue, as every store can (RabbitMQ finds no task by id).
        let env = site.client.dlq_task(&q, *id).await.unwrap();
        assert_eq!(env.status, Status::Dead);
        let expired = env
            .attempts
            .iter()
            .filter(|a| a.outcome == Some(Outcome::LeaseExpired))
            .count();
        assert_eq!(
            (env.attempts.len(), expired),
            (2, 2),
            "task {id}: two lapsed leases, no third run"
        );
    }
    eprintln!("{kind:?}: {TASKS} poison tasks dead after {workers} workers died");
    site.stop().await;
}

/// Readiness, the queue list (counts or depths, said which) and what a
/// store cannot do answered as UNSUPPORTED.
async fn readiness_queue_list_and_honest_capabilities(kind: Kind) {
    let site = Site::start(kind).await;
    site.client.ready().await.unwrap();
    let q = site.queue("listed");
    site.submit(&q, json!({})).await;
    let rows = site.client.queues(std::slice::from_ref(&q)).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].queue, q);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rows = rows;
    while rows[0].pending != 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rows = site.client.queues(std::slice::from_ref(&q)).await.unwrap();
    }
    assert_eq!(rows[0].pending, 1, "{rows:?}");
    if site.can("counts") {
        assert_eq!(rows[0].in_flight, Some(0));
        let all = site.client.queues(&[]).await.unwrap();
        assert!(all.iter().any(|r| r.queue == q));
    } else {
        assert!(site.can("depths"));
        assert_eq!(rows[0].in_flight, None);
    }
    assert_code(
        site.client.queues(&[site.queue("never")]).await,
        404,
        "QUEUE_NOT_FOUND",
    );
    let id = rows_first_id(&site, &q).await;
    if !site.can("get_by_id") {
        assert_code(site.client.task(id).await, 501, "UNSUPPORTED");
    } else {
        assert_eq!(site.client.task(id).await.unwrap().queue, q);
    }
    site.stop().await;
}

async fn rows_first_id(site: &Site, q: &str) -> rdq_envelope::TaskId {
    let c = site.claim(q, 1, Some(30_000)).await;
    assert_eq!(c.len(), 1);
    let id = c[0].envelope.id;
    site.client
        .settle(
            id,
            &settle(&c[0].lease_token, ReportedOutcome::Release, None),
        )
        .await
        .unwrap();
    id
}

/// The DLQ: list, show, export, purge, import back byte for byte, redrive.
async fn the_dlq_lists_shows_exports_imports_purges_and_redrives(kind: Kind) {
    let site = Site::start(kind).await;
    let q = site.queue("dlq");
    site.set_config(&q, json!({"max_attempts": 1})).await;
    for i in 0..3 {
        site.submit(&q, json!({"n": i})).await;
    }
    let claimed = site.claim(&q, 3, None).await;
    assert_eq!(claimed.len(), 3);
    for (i, c) in claimed.iter().enumerate() {
        let kind = if i == 0 {
            "e2e.Timeout"
        } else {
            "e2e.Declined"
        };
        site.client
            .settle(
                c.envelope.id,
                &settle(
                    &c.lease_token,
                    ReportedOutcome::RetryableFailure,
                    Some(kind),
                ),
            )
            .await
            .unwrap();
    }
    let (page, _) = site
        .client
        .dlq_page(&q, &PageQuery::default())
        .await
        .unwrap();
    assert_eq!(page.len(), 3);
    assert!(page.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    let filtered = PageQuery {
        error_type: Some("e2e.Decl*".into()),
        ..Default::default()
    };
    assert_eq!(
        site.client.dlq_page(&q, &filtered).await.unwrap().0.len(),
        2
    );
    // Why they died: their one attempt was spent.
    for env in &page {
        let reason = env.dead_reason.as_ref().expect("a dead task has a reason");
        assert_eq!(
            (reason.code.as_str(), reason.by.as_str()),
            ("ATTEMPTS_EXHAUSTED", "worker")
        );
    }
    let reasons = site.client.dlq_reasons(&q).await.unwrap();
    let counted: Vec<(&str, u64)> = reasons
        .reasons
        .iter()
        .map(|r| (r.reason.as_str(), r.count))
        .collect();
    assert_eq!(counted, vec![("ATTEMPTS_EXHAUSTED", 3)]);
    let by_reason = |reason: &str| PageQuery {
        reason: Some(reason.into()),
        ..Default::default()
    };
    let exhausted = by_reason("ATTEMPTS_EXHAUSTED");
    assert_eq!(
        site.client.dlq_page(&q, &exhausted).await.unwrap().0.len(),
        3
    );
    let cancelled = by_reason("CANCELLED");
    assert!(
        site.client
            .dlq_page(&q, &cancelled)
            .await
            .unwrap()
            .0
            .is_empty()
    );
    let err = site
        .client
        .dlq_page(&q, &by_reason("exhausted"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status, err.code.as_str()),
        (Some(400), "INVALID_ARGUMENT")
    );
    let shown = site.client.dlq_task(&q, page[0].id).await.unwrap();
    assert_eq!(shown.encode(), page[0].encode());
    let mut exported = Vec::new();
    let n = site
        .client
        .dlq_export(&q, None, None, |chunk| {
            exported.extend_from_slice(chunk);
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(n, 3);
    let purged = site.client.dlq_purge(&q, false).await.unwrap();
    assert_eq!(purged.purged, 3);
    assert!(
        site.client
            .dlq_page(&q, &PageQuery::default())
            .await
            .unwrap()
            .0
            .is_empty()
    );
    let imported = site
        .client
        .dlq_import(&q, exported.clone(), false)
        .await
        .unwrap();
    assert_eq!(imported.checked, 3);
    let mut again = Vec::new();
    site.client
        .dlq_export(&q, None, None, |chunk| {
            again.extend_from_slice(chunk);
            Ok(())
        })
        .await
        .unwrap();
    let lines = |b: &[u8]| {
        let mut l: Vec<Vec<u8>> = b
            .split(|&c| c == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        l.sort();
        l
    };
    assert_eq!(
        lines(&again),
        lines(&exported),
        "export → purge → import gives back the same bytes"
    );
    // A bad line: nothing imported, the line named.
    let bad = site
        .client
        .dlq_import(&q, b"{\"not\": \"an envelope\"}\n".to_vec(), false)
        .await;
    let err = bad.unwrap_err();
    assert_eq!(err.code, "INVALID_IMPORT");
    assert_eq!(err.import_errors().unwrap().0[0].line, 1);
    // Redrive the timeouts (dry run first), then work them.
    let body = RedriveBody {
        error_type: Some("e2e.Timeout".into()),
        dry_run: true,
        ..Default::default()
    };
    assert_eq!(site.client.dlq_redrive(&q, &body).await.unwrap().count, 1);
    let body = RedriveBody {
        dry_run: false,
        ..body
    };
    let redriven = site.client.dlq_redrive(&q, &body).await.unwrap();
    assert_eq!(redriven.count, 1);
    let back = site.claim(&q, 1, None).await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].envelope.redrive_count, 1);
    assert_eq!(back[0].envelope.attempts.len(), 2, "history kept");
    site.stop().await;
}

/// Callback dispatch starts on every store and maps the answers: 2xx
/// succeeds, 4xx dead-letters with the status as the error type.
async fn callbacks_are_dispatched_and_mapped(kind: Kind) {
    let site = Site::start(kind).await;
    let receiver = Receiver::start().await;
    let q = site.queue("hooks");
    site.set_config(
        &q,
        json!({"max_attempts": 1, "callback": {"url": receiver.url, "timeout_ms": 5000}}),
    )
    .await;
    let ok = site.submit(&q, json!({"status": 200})).await;
    let bad = site.submit(&q, json!({"status": 422})).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut dead = Vec::new();
    while Instant::now() < deadline {
        dead = site
            .client
            .dlq_page(&q, &PageQuery::default())
            .await
            .unwrap()
            .0;
        // The receiver sees the call before the dispatcher has stored its
        // outcome: wait for the success to be stored too.
        let settled = !site.can("get_by_id")
            || site.client.task(ok.id).await.unwrap().status == Status::Succeeded;
        if !dead.is_empty() && !receiver.for_task(&ok.id.to_string()).is_empty() && settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(receiver.for_task(&ok.id.to_string()).len(), 1);
    assert_eq!(dead.len(), 1, "{}", site.server.as_ref().unwrap().log());
    assert_eq!(dead[0].id, bad.id);
    assert_eq!(dead[0].attempts[0].outcome, Some(Outcome::PermanentFailure));
    if site.can("get_by_id") {
        assert_eq!(
            site.client.task(ok.id).await.unwrap().status,
            Status::Succeeded
        );
    }
    site.stop().await;
}

/// Cancelling PENDING tasks over HTTP: by id, by header filter with a dry
/// run, refusals with stable codes, the reason in the DLQ, a redrive back.
async fn pending_tasks_are_cancelled_by_id_and_filter(kind: Kind) {
    let site = Site::start(kind).await;
    let q = site.queue("cancel");
    let a = site.submit(&q, json!({"n": 1})).await;
    let b = site.submit(&q, json!({"n": 2})).await;
    let c = site.submit(&q, json!({"n": 3})).await;
    let by_id = CancelBody {
        ids: Some(vec![a.id.to_string()]),
        message: Some("order withdrawn".into()),
        ..Default::default()
    };
    if !site.can("cancel") {
        let err = site.client.cancel_tasks(&q, &by_id).await.unwrap_err();
        assert_eq!((err.status, err.code.as_str()), (Some(501), "UNSUPPORTED"));
        site.stop().await;
        return;
    }
    // The operator's view first: the queue's tasks by status, handler, header.
    let tagged = SubmitBody {
        queue: q.clone(),
        handler_ref: "report".into(),
        headers: [("tenant".to_owned(), "acme".to_owned())].into(),
        ..Default::default()
    };
    let (_, d) = site.client.submit(&tagged).await.unwrap();
    let page = |status: Option<&str>, handler: Option<&str>, header: Option<&str>| TaskPageQuery {
        status: status.map(str::to_owned),
        handler_ref: handler.map(str::to_owned),
        header: header.map(str::to_owned),
        ..Default::default()
    };
    let ids = |items: Vec<Envelope>| items.into_iter().map(|e| e.id).collect::<Vec<_>>();
    let (pending, _) = site
        .client
        .tasks_page(&q, &page(Some("PENDING"), None, None))
        .await
        .unwrap();
    assert_eq!(ids(pending), vec![d.id, c.id, b.id, a.id], "newest first");
    let (reports, _) = site
        .client
        .tasks_page(&q, &page(None, Some("report"), None))
        .await
        .unwrap();
    assert_eq!(ids(reports), vec![d.id]);
    let (acme, _) = site
        .client
        .tasks_page(&q, &page(None, None, Some("tenant=acme")))
        .await
        .unwrap();
    assert_eq!(ids(acme), vec![d.id]);
    let err = site
        .client
        .tasks_page(&q, &page(None, Some("Bad Ref"), None))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status, err.code.as_str()),
        (Some(400), "INVALID_HANDLER_REF")
    );
    let err = site
        .client
        .tasks_page(&q, &page(Some("LOST"), None, None))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status, err.code.as_str()),
        (Some(400), "INVALID_FIELD")
    );
    let by_d = CancelBody {
        headers: Some([("tenant".to_owned(), "acme".to_owned())].into()),
        ..Default::default()
    };
    assert_eq!(
        site.client.cancel_tasks(&q, &by_d).await.unwrap().ids,
        vec![d.id.to_string()]
    );

    let done = site.client.cancel_tasks(&q, &by_id).await.unwrap();
    assert_eq!((done.count, done.ids.clone()), (1, vec![a.id.to_string()]));
    let err = site.client.cancel_tasks(&q, &by_id).await.unwrap_err();
    assert_eq!(
        (err.status, err.code.as_str()),
        (Some(409), "INVALID_TRANSITION")
    );
    let unknown = CancelBody {
        ids: Some(vec![rdq_envelope::TaskId::generate().to_string()]),
        ..Default::default()
    };
    let err = site.client.cancel_tasks(&q, &unknown).await.unwrap_err();
    assert_eq!(
        (err.status, err.code.as_str()),
        (Some(404), "TASK_NOT_FOUND")
    );
    let none = CancelBody {
        ids: Some(Vec::new()),
        dry_run: true,
        ..Default::default()
    };
    let err = site.client.cancel_tasks(&q, &none).await.unwrap_err();
    assert_eq!(
        (err.status, err.code.as_str()),
        (Some(400), "INVALID_FIELD")
    );
    let all = CancelBody {
        limit: Some(1),
        dry_run: true,
        ..Default::default()
    };
    let dry = site.client.cancel_tasks(&q, &all).await.unwrap();
    assert_eq!(dry.ids, vec![b.id.to_string()], "oldest first, limited");
    let rest = CancelBody {
        ..Default::default()
    };
    let done = site.client.cancel_tasks(&q, &rest).await.unwrap();
    assert_eq!(done.ids, vec![b.id.to_string(), c.id.to_string()]);

    // In the DLQ with their reason; a redrive by reason brings them back.
    let cancelled = PageQuery {
        reason: Some("CANCELLED".into()),
        ..Default::default()
    };
    let (dead, _) = site.client.dlq_page(&q, &cancelled).await.unwrap();
    assert_eq!(dead.len(), 4);
    let first = dead.iter().find(|e| e.id == a.id).unwrap();
    let reason = first.dead_reason.as_ref().unwrap();
    assert_eq!(reason.message.as_deref(), Some("order withdrawn"));
    assert!(!reason.by.is_empty());
    let back = RedriveBody {
        reason: Some("CANCELLED".into()),
        ..Default::default()
    };
    assert_eq!(site.client.dlq_redrive(&q, &back).await.unwrap().count, 4);
    assert_eq!(site.claim(&q, 4, None).await.len(), 4);
    site.stop().await;
}

macro_rules! e2e_suite {
    ($store:ident, $kind:expr) => {
        mod $store {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn pull_workers_claim_settle_and_extend() {
                super::pull_workers_claim_settle_and_extend($kind).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_lapsed_lease_comes_back_as_lease_expired() {
                super::a_lapsed_lease_comes_back_as_lease_expired($kind).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn readiness_queue_list_and_honest_capabilities() {
                super::readiness_queue_list_and_honest_capabilities($kind).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_dlq_lists_shows_exports_imports_purges_and_redrives() {
                super::the_dlq_lists_shows_exports_imports_purges_and_redrives($kind).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn pending_tasks_are_cancelled_by_id_and_filter() {
                super::pending_tasks_are_cancelled_by_id_and_filter($kind).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn poison_tasks_that_kill_their_worker_reach_the_dlq_by_lease_expiry() {
                super::poison_tasks_that_kill_their_worker_reach_the_dlq_by_lease_expiry($kind)
                    .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn callbacks_are_dispatched_and_mapped() {
                super::callbacks_are_dispatched_and_mapped($kind).await;
            }
        }
    };
}

e2e_suite!(embedded, Kind::Embedded);
e2e_suite!(postgres, Kind::Postgres);
e2e_suite!(rabbitmq, Kind::Rabbit);
e2e_suite!(redis, Kind::Redis);
