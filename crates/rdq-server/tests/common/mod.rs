//! A real server on `127.0.0.1:0` for each test, over the in-memory store
//! (or an embedded one in a temporary directory), and a small JSON client.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    dead_code
)]

use std::sync::Arc;
use std::time::Duration;

use rdq_engine::Store;
use rdq_runtime::{ShutdownTrigger, shutdown_channel};
use rdq_server::{Server, ServerConfig};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::task::JoinHandle;

pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    pub store: Arc<dyn Store>,
    pub token: Option<String>,
    /// The server's source status registry (`[[sources]]`).
    pub sources: rdq_source::Registry,
    trigger: ShutdownTrigger,
    handle: Option<JoinHandle<Result<(), rdq_server::ServerError>>>,
}

/// A configuration for tests: port 0, fast maintenance.
pub fn test_config() -> ServerConfig {
    let mut config = ServerConfig {
        listen: "127.0.0.1:0".into(),
        shutdown_grace_ms: 2_000,
        ..ServerConfig::default()
    };
    config.maintenance.reaper_interval_ms = 50;
    config.callbacks.refresh_interval_ms = 100;
    config.callbacks.poll_interval_ms = 50;
    config
}

impl TestServer {
    pub async fn start() -> Self {
        Self::with(
            test_config(),
            Arc::new(rdq_store_memory::MemoryStore::new()),
        )
        .await
    }

    pub async fn with(config: ServerConfig, store: Arc<dyn Store>) -> Self {
        let server = Server::bind(config, Arc::clone(&store)).await.unwrap();
        let base = format!("http://{}", server.local_addr());
        let sources = server.sources().clone();
        let (trigger, mut stop) = shutdown_channel();
        let handle = tokio::spawn(server.run(async move { stop.wait().await }));
        Self {
            base,
            client: reqwest::Client::new(),
            store,
            token: None,
            sources,
            trigger,
            handle: Some(handle),
        }
    }

    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    /// Sends a request; returns status, content type and body as JSON
    /// (`Value::Null` for an empty or non-JSON body).
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.call_as(self.token.as_deref(), method, path, body)
            .await
    }

    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        Reply::from(req.send().await.unwrap()).await
    }

    pub async fn raw(&self, method: Method, path: &str, body: Vec<u8>) -> Reply {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .body(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        Reply::from(req.send().await.unwrap()).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Reply {
        self.call(Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call(Method::DELETE, path, None).await
    }

    /// Submits a small JSON task and returns its envelope.
    pub async fn submit(&self, queue: &str, payload: Value) -> Value {
        let r = self
            .post(
                "/v1/tasks",
                serde_json::json!({"queue": queue, "handler_ref": "h", "payload_json": payload}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body
    }

    /// Waits (bounded) until task `id` has left PENDING and IN_FLIGHT;
    /// returns it.
    pub async fn settled(&self, id: &str) -> Value {
        for _ in 0..400 {
            let r = self.get(&format!("/v1/tasks/{id}")).await;
            let status = r.body["status"].as_str().unwrap_or_default().to_owned();
            if status == "DEAD" || status == "SUCCEEDED" {
                return r.body;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("task {id} was not settled");
    }

    /// Every task in the store, as canonical bytes sorted by id: a
    /// fingerprint to compare before and after a refused request.
    pub async fn snapshot(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for c in self.store.as_counts().unwrap().counts().await.unwrap() {
            let mut cursor = None;
            loop {
                let page = self
                    .store
                    .as_listing()
                    .unwrap()
                    .list(&rdq_engine::ListQuery {
                        queue: c.queue.clone(),
                        cursor,
                        limit: 1000,
                        order: rdq_engine::ListOrder::OldestFirst,
                        ..rdq_engine::ListQuery::default()
                    })
                    .await
                    .unwrap();
                out.extend(page.items.iter().map(|e| e.encode()));
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        out.sort();
        out
    }

    pub async fn stop(mut self) {
        self.trigger.trigger();
        if let Some(h) = self.handle.take() {
            tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .expect("the server stops within 10 s")
                .unwrap()
                .unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.trigger.trigger();
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub body: Value,
    pub text: String,
}

impl Reply {
    async fn from(resp: reqwest::Response) -> Self {
        let status = resp.status();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = resp.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Self {
            status,
            content_type,
            body,
            text,
        }
    }

    /// Asserts a problem document with this status and code.
    pub fn assert_problem(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        assert_eq!(
            self.content_type, "application/problem+json",
            "{}",
            self.text
        );
        assert_eq!(self.body["code"], code, "{}", self.text);
        assert_eq!(self.body["status"], status);
        for member in ["type", "title", "detail"] {
            assert!(
                self.body[member].is_string(),
                "missing {member}: {}",
                self.text
            );
        }
    }
}
