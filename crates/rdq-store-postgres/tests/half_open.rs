//! A connection to PostgreSQL that goes half-open (the peer vanished
//! without a FIN or RST: the socket stays open and nothing comes back) must
//! not hold an operation past `wait_ms`: it fails with `STORE_UNAVAILABLE`,
//! and once the network is back the store works again by itself.
//!
//! The store reaches the database through a small TCP relay of the test's
//! own that can swallow everything in both directions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdq_engine::store::admin::TaskLookup;
use rdq_engine::{Engine, EngineError, SubmitRequest, SystemClock};
use rdq_store_postgres::PostgresStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Relays connections to `upstream`; while `silent`, it reads and drops
/// everything in both directions and keeps every socket open.
struct Relay {
    port: u16,
    silent: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let silent = Arc::new(AtomicBool::new(false));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (s, l) = (Arc::clone(&silent), Arc::clone(&links));
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let mut links = l.lock().unwrap();
                links.push(tokio::spawn(pipe(cr, sw, Arc::clone(&s))));
                links.push(tokio::spawn(pipe(sr, cw, Arc::clone(&s))));
            }
        });
        Self {
            port,
            silent,
            links,
        }
    }

    /// The network heals: the half-open connections are gone for good (a
    /// real one never carries data again), new ones get through.
    fn heal(&self) {
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
        self.silent.store(false, Ordering::Release);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silent.load(Ordering::Acquire) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn request(n: u32) -> SubmitRequest {
    SubmitRequest {
        queue: "halfopen".into(),
        handler_ref: "h".into(),
        payload: format!("{{\"n\":{n}}}").into_bytes(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_on_a_half_open_connection_fails_within_wait_ms_and_the_store_recovers() {
    // postgres://user@host:port/db → the same through the relay.
    let direct = common::url();
    let (user, rest) = direct.split_once('@').unwrap();
    let (upstream, db) = rest.split_once('/').unwrap();
    let relay = Relay::start(upstream.to_owned()).await;
    let wait = Duration::from_millis(1500);
    let url = format!(
        "{user}@127.0.0.1:{}/{db}{}wait_ms={}",
        relay.port,
        if db.contains('?') { '&' } else { '?' },
        wait.as_millis()
    );
    let store = PostgresStore::open_temporary(&url).await.unwrap();
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
    let first = engine.submit(request(1)).await.unwrap().envelope().id;

    relay.silent.store(true, Ordering::Release);
    let started = Instant::now();
    let submitted = tokio::time::timeout(Duration::from_secs(30), engine.submit(request(2)))
        .await
        .expect("a submit on a half-open connection got no answer in 30 s");
    let took = started.elapsed();
    assert_eq!(
        submitted.as_ref().map_err(EngineError::code).err(),
        Some("STORE_UNAVAILABLE"),
        "{submitted:?}"
    );
    // The deadline, plus the backoff step it may overshoot by.
    assert!(
        took < wait + Duration::from_secs(1),
        "answered after {took:?}"
    );
    let started = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(30), store.get(first))
        .await
        .expect("a read on a half-open connection got no answer in 30 s");
    assert_eq!(read.map_err(|e| e.code()).err(), Some("STORE_UNAVAILABLE"));
    let took = started.elapsed();
    assert!(
        took < wait + Duration::from_secs(1),
        "answered after {took:?}"
    );

    relay.heal();
    let again = engine.submit(request(3)).await;
    assert!(again.is_ok(), "after the heal: {again:?}");
    assert_eq!(store.get(first).await.unwrap().id, first);
}
