//! Where the operator commands (`submit`, `task`, `queue`, `dlq`) go: a
//! running server over HTTP (`--server URL`, token from `RDQ_TOKEN`), or a
//! store opened directly (`--store`). Both offer the same operations with the
//! same results; the store path calls the very functions the server's
//! handlers call (`rdq_server::dead_letters`, `rdq_server::submission`).
//!
//! Which one: `--server`, else `--store`, else `RDQ_SERVER`, else
//! `RDQ_STORE`, else the server at `http://127.0.0.1:7480`. Operations
//! through a server are audited there; operations straight on a store are
//! not (there is no server to record them).

use std::io::Write;
use std::sync::Arc;

use clap::Args;
use rdq_engine::{Engine, EngineError, QueuePolicy, RedriveRequest, Submitted, SystemClock};
use rdq_envelope::{Envelope, Status, TaskId};
use rdq_server::callback::{CallbackSettings, CallbackTarget};
use rdq_server::dead_letters::{self, LineError};
use rdq_server::submission::SubmitBody;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::CliError;
use crate::stores::open_store;

/// Where the default server listens.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7480";

/// `--server`, `--store` and `--json`, accepted by every operator command.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// A running rdq-server (token from RDQ_TOKEN) [env: RDQ_SERVER]
    /// [default: http://127.0.0.1:7480].
    #[arg(long, global = true, value_name = "URL", conflicts_with = "store")]
    pub server: Option<String>,
    /// Work on a store directly: a directory (embedded store) [env: RDQ_STORE].
    #[arg(long, global = true, value_name = "STORE")]
    pub store: Option<String>,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

/// An operator command's way to rdq.
pub enum Backend {
    /// A running server.
    Server(ServerClient),
    /// A store, through the engine.
    Store(Engine),
}

/// One queue's counts. On a store that reports broker queue depths instead
/// of counting tasks (RabbitMQ), `pending` is the messages ready in the work
/// queue, and IN_FLIGHT and SUCCEEDED are unknown (`None`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueRow {
    /// The queue.
    pub queue: String,
    /// PENDING tasks.
    pub pending: u64,
    /// IN_FLIGHT tasks.
    #[serde(default)]
    pub in_flight: Option<u64>,
    /// SUCCEEDED tasks.
    #[serde(default)]
    pub succeeded: Option<u64>,
    /// DEAD tasks.
    pub dead: u64,
}

/// Why an import was refused.
#[derive(Debug)]
pub enum ImportRefusal {
    /// Bad lines; nothing was imported.
    Lines(Vec<LineError>, usize),
    /// Another failure.
    Other(CliError),
}

impl From<CliError> for ImportRefusal {
    fn from(e: CliError) -> Self {
        Self::Other(e)
    }
}

impl Backend {
    /// Picks and opens the backend `args` name (see the module documentation).
    pub fn open(args: &TargetArgs) -> Result<Self, CliError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(url) = &args.server {
            return ServerClient::new(url).map(Self::Server);
        }
        if let Some(spec) = &args.store {
            return Self::store(spec);
        }
        if let Some(url) = env("RDQ_SERVER") {
            return ServerClient::new(&url).map(Self::Server);
        }
        if let Some(spec) = env("RDQ_STORE") {
            return Self::store(&spec);
        }
        ServerClient::new(DEFAULT_SERVER).map(Self::Server)
    }

    fn store(spec: &str) -> Result<Self, CliError> {
        Ok(Self::Store(Engine::new(
            open_store(spec)?,
            Arc::new(SystemClock),
        )))
    }

    /// Submits a task; `true` when it was created (not an idempotent repeat).
    pub async fn submit(&self, body: Value) -> Result<(bool, Envelope), CliError> {
        match self {
            Self::Server(c) => {
                let (status, bytes) = c.send(Method::POST, "/v1/tasks", Some(body)).await?;
                Ok((status == StatusCode::CREATED, decode(&bytes)?))
            }
            Self::Store(engine) => {
                let body: SubmitBody = serde_json::from_value(body)
                    .map_err(|e| CliError::new("MALFORMED_REQUEST", e.to_string()))?;
                let request = body.into_request(None).map_err(api)?;
                match engine.submit(request).await.map_err(engine_err)? {
                    Submitted::Created(e) => Ok((true, e)),
                    Submitted::Existing(e) => Ok((false, e)),
                }
            }
        }
    }

    /// The task with this id.
    pub async fn task(&self, id: &str) -> Result<Envelope, CliError> {
        match self {
            Self::Server(c) => {
                let (_, bytes) = c
                    .send(Method::GET, &format!("/v1/tasks/{id}"), None)
                    .await?;
                decode(&bytes)
            }
            Self::Store(engine) => {
                let id = parse_id(id)?;
                engine.store().get(id).await.map_err(engine_err)
            }
        }
    }

    /// The dead task `id` of `queue`, on any store that can list its DLQ.
    pub async fn dead_task(&self, queue: &str, id: &str) -> Result<Envelope, CliError> {
        match self {
            Self::Server(c) => {
                let (_, bytes) = c
                    .send(Method::GET, &format!("/v1/queues/{queue}/dead/{id}"), None)
                    .await?;
                decode(&bytes)
            }
            Self::Store(engine) => {
                let id = parse_id(id)?;
                engine.dead_task(queue, id).await.map_err(engine_err)
            }
        }
    }

    /// Every queue with its counts, or only the named ones (refused with
    /// `QUEUE_NOT_FOUND` when one does not exist). A store that cannot count
    /// tasks but can report broker queue depths answers for named queues.
    pub async fn queues(&self, names: &[String]) -> Result<Vec<QueueRow>, CliError> {
        for name in names {
            rdq_envelope::validate_queue_name(name)?;
        }
        let rows = match self {
            Self::Server(c) => {
                let (_, bytes) = c.send(Method::GET, "/v1/queues", None).await?;
                let v: Value = json_of(&bytes)?;
                serde_json::from_value(v["queues"].clone())
                    .map_err(|e| CliError::new("BAD_RESPONSE", e.to_string()))?
            }
            Self::Store(engine) if !engine.store().capabilities().counts && !names.is_empty() => {
                let mut rows = Vec::with_capacity(names.len());
                for name in names {
                    if let Some(d) = engine.store().depths(name).await.map_err(engine_err)? {
                        rows.push(QueueRow {
                            queue: d.queue,
                            pending: d.ready,
                            in_flight: None,
                            succeeded: None,
                            dead: d.dead,
                        });
                    }
                }
                rows
            }
            Self::Store(engine) => engine
                .store()
                .counts()
                .await
                .map_err(|e| {
                    engine_err(e).hint_if_unsupported(
                        "name the queues (rdq queue list QUEUE…) to see their depths",
                    )
                })?
                .into_iter()
                .map(|c| QueueRow {
                    queue: c.queue,
                    pending: c.pending,
                    in_flight: Some(c.in_flight),
                    succeeded: Some(c.succeeded),
                    dead: c.dead,
                })
                .collect(),
        };
        if names.is_empty() {
            return Ok(rows);
        }
        let (mut named, mut missing) = (Vec::with_capacity(names.len()), Vec::new());
        for name in names {
            match rows.iter().find(|r| &r.queue == name) {
                Some(row) => named.push(row.clone()),
                None => missing.push(name.as_str()),
            }
        }
        if missing.is_empty() {
            Ok(named)
        } else {
            Err(CliError::new(
                "QUEUE_NOT_FOUND",
                format!("no queue {}", missing.join(", ")),
            ))
        }
    }

    /// The live policy of `queue` (`None` for a queue that does not exist).
    pub async fn config(&self, queue: &str) -> Result<Option<Value>, CliError> {
        match self {
            Self::Server(c) => {
                match c
                    .send(Method::GET, &format!("/v1/queues/{queue}/config"), None)
                    .await
                {
                    Ok((_, bytes)) => json_of(&bytes).map(Some),
                    Err(e) if e.code == "QUEUE_NOT_FOUND" => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Self::Store(engine) => {
                if !queue_known(engine, queue).await? {
                    return Ok(None);
                }
                let policy = engine.policy(queue).await.map_err(engine_err)?;
                serde_json::to_value(policy)
                    .map(Some)
                    .map_err(|e| CliError::new("INTERNAL", e.to_string()))
            }
        }
    }

    /// Applies a partial policy document; returns the new policy.
    pub async fn set_config(&self, queue: &str, patch: Value) -> Result<Value, CliError> {
        match self {
            Self::Server(c) => {
                let (_, bytes) = c
                    .send(
                        Method::PUT,
                        &format!("/v1/queues/{queue}/config"),
                        Some(patch),
                    )
                    .await?;
                json_of(&bytes)
            }
            Self::Store(engine) => {
                let current: QueuePolicy = engine.policy(queue).await.map_err(engine_err)?;
                let next = current.patched(&patch).map_err(engine_err)?;
                // The target's shape is checked here; whether its URL is
                // allowed is the server's to say (its allowlist), when it loads it.
                let any_url = CallbackSettings {
                    allow: vec!["*".to_owned()],
                    ..CallbackSettings::default()
                };
                CallbackTarget::from_policy(&next, &any_url)
                    .map_err(|why| CliError::new("INVALID_POLICY", why))?;
                engine.set_policy(queue, &next).await.map_err(engine_err)?;
                serde_json::to_value(next).map_err(|e| CliError::new("INTERNAL", e.to_string()))
            }
        }
    }

    /// One page of `queue`'s DLQ, newest first.
    pub async fn dead_page(
        &self,
        queue: &str,
        error_type: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Envelope>, Option<String>), CliError> {
        match self {
            Self::Server(c) => {
                let mut query = vec![("limit", limit.to_string())];
                if let Some(g) = error_type {
                    query.push(("error_type", g.to_owned()));
                }
                if let Some(cur) = cursor {
                    query.push(("cursor", cur.to_owned()));
                }
                let path = format!("/v1/queues/{queue}/dead?{}", encode_query(&query));
                let (_, bytes) = c.send(Method::GET, &path, None).await?;
                let page: Value = json_of(&bytes)?;
                let mut items = Vec::new();
                for item in page["items"].as_array().into_iter().flatten() {
                    items.push(decode(item.to_string().as_bytes())?);
                }
                Ok((items, page["next_cursor"].as_str().map(str::to_owned)))
            }
            Self::Store(engine) => {
                require_queue(engine, queue).await?;
                let cursor = cursor.map(parse_id).transpose()?;
                let page =
                    dead_letters::page(engine, queue, error_type.map(str::to_owned), cursor, limit)
                        .await
                        .map_err(engine_err)?;
                Ok((page.items, page.next_cursor.map(|c| c.to_string())))
            }
        }
    }

    /// Redrives (or, on a dry run, lists) matching dead tasks; returns their ids.
    pub async fn redrive(
        &self,
        queue: &str,
        ids: Option<Vec<String>>,
        error_type: Option<String>,
        limit: Option<usize>,
        dry_run: bool,
    ) -> Result<Vec<String>, CliError> {
        match self {
            Self::Server(c) => {
                let body = json!({"ids": ids, "error_type": error_type, "limit": limit, "dry_run": dry_run});
                let (_, bytes) = c
                    .send(
                        Method::POST,
                        &format!("/v1/queues/{queue}/dead/redrive"),
                        Some(body),
                    )
                    .await?;
                let v = json_of(&bytes)?;
                Ok(v["ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.as_str().map(str::to_owned))
                    .collect())
            }
            Self::Store(engine) => {
                require_queue(engine, queue).await?;
                let ids = ids
                    .map(|ids| {
                        ids.iter()
                            .map(|i| parse_id(i))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .transpose()?;
                let redriven = engine
                    .redrive(&RedriveRequest {
                        queue: queue.to_owned(),
                        ids,
                        error_type,
                        limit,
                        dry_run,
                    })
                    .await
                    .map_err(engine_err)?;
                Ok(redriven.iter().map(ToString::to_string).collect())
            }
        }
    }

    /// Writes `queue`'s DLQ as JSONL to `out`, calling `progress` with the
    /// number of envelopes written so far; returns the total.
    pub async fn export(
        &self,
        queue: &str,
        error_type: Option<&str>,
        out: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<u64, CliError> {
        let io =
            |e: std::io::Error| CliError::new("IO_ERROR", format!("cannot write the export: {e}"));
        let mut written = 0u64;
        match self {
            Self::Server(c) => {
                let mut path = format!("/v1/queues/{queue}/dead/export");
                if let Some(g) = error_type {
                    path.push('?');
                    path.push_str(&encode_query(&[("error_type", g.to_owned())]));
                }
                let mut response = c.request(Method::GET, &path, None).await?;
                loop {
                    match response.chunk().await {
                        Ok(Some(chunk)) => {
                            out.write_all(&chunk).map_err(io)?;
                            written += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
                            progress(written);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            return Err(CliError::new(
                                "EXPORT_INCOMPLETE",
                                format!("the export broke off after {written} envelopes: {e}"),
                            ));
                        }
                    }
                }
            }
            Self::Store(engine) => {
                require_queue(engine, queue).await?;
                let mut cursor: Option<TaskId> = None;
                loop {
                    let page = dead_letters::export_page(
                        engine,
                        queue,
                        error_type.map(str::to_owned),
                        cursor,
                    )
                    .await
                    .map_err(engine_err)?;
                    let mut chunk = Vec::new();
                    for env in &page.items {
                        env.encode_into(&mut chunk);
                        chunk.push(b'\n');
                    }
                    out.write_all(&chunk).map_err(io)?;
                    written += page.items.len() as u64;
                    progress(written);
                    match page.next_cursor {
                        Some(c) => cursor = Some(c),
                        None => break,
                    }
                }
            }
        }
        out.flush().map_err(io)?;
        Ok(written)
    }

    /// Imports JSONL into `queue`'s DLQ (all or nothing); returns how many
    /// were imported (or would be, on a dry run).
    pub async fn import(
        &self,
        queue: &str,
        jsonl: Vec<u8>,
        dry_run: bool,
        progress: &dyn Fn(u64),
    ) -> Result<u64, ImportRefusal> {
        match self {
            Self::Server(c) => {
                let path = format!("/v1/queues/{queue}/dead/import?dry_run={dry_run}");
                let response = c.raw(Method::POST, &path, jsonl).await?;
                let status = response.status();
                let bytes = response
                    .bytes()
                    .await
                    .map_err(|e| CliError::new("SERVER_UNREACHABLE", e.to_string()))?;
                let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                if status.is_success() {
                    let n = v["checked"].as_u64().unwrap_or(0);
                    progress(n);
                    return Ok(n);
                }
                if v["code"] == "INVALID_IMPORT" {
                    let errors: Vec<LineError> = v["errors"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|e| LineError {
                            line: e["line"].as_u64().unwrap_or(0) as usize,
                            code: e["code"].as_str().unwrap_or("").to_owned(),
                            message: e["message"].as_str().unwrap_or("").to_owned(),
                        })
                        .collect();
                    let total = v["error_count"].as_u64().unwrap_or(errors.len() as u64) as usize;
                    return Err(ImportRefusal::Lines(errors, total));
                }
                Err(problem(status, &bytes).into())
            }
            Self::Store(engine) => {
                rdq_envelope::validate_queue_name(queue).map_err(CliError::from)?;
                let policy = engine.policy(queue).await.map_err(engine_err)?;
                let mut plan = dead_letters::plan_import(&jsonl, queue, policy.max_envelope_bytes);
                dead_letters::check_existing(engine, &mut plan)
                    .await
                    .map_err(engine_err)?;
                if !plan.errors.is_empty() {
                    let n = plan.errors.len();
                    return Err(ImportRefusal::Lines(plan.errors, n));
                }
                let count = plan.envelopes.len() as u64;
                if dry_run {
                    progress(count);
                    return Ok(count);
                }
                dead_letters::apply_import(engine, plan, progress)
                    .await
                    .map_err(|f| match f.error {
                        Some(e) => ImportRefusal::Other(engine_err(e)),
                        None => {
                            let n = f.refused.len();
                            ImportRefusal::Lines(f.refused, n)
                        }
                    })
            }
        }
    }

    /// Removes (or counts, on a dry run) every dead task of `queue`.
    pub async fn purge(&self, queue: &str, dry_run: bool) -> Result<u64, CliError> {
        match self {
            Self::Server(c) => {
                let (_, bytes) = c
                    .send(
                        Method::DELETE,
                        &format!("/v1/queues/{queue}/dead?dry_run={dry_run}"),
                        None,
                    )
                    .await?;
                Ok(json_of(&bytes)?["purged"].as_u64().unwrap_or(0))
            }
            Self::Store(engine) => {
                require_queue(engine, queue).await?;
                engine
                    .store()
                    .purge(queue, Status::Dead, dry_run)
                    .await
                    .map_err(engine_err)
            }
        }
    }
}

/// A small client for rdq-server's HTTP API.
pub struct ServerClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl ServerClient {
    /// A client for the server at `base`, with the token in `RDQ_TOKEN`.
    pub fn new(base: &str) -> Result<Self, CliError> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::new(
                "INVALID_ARGUMENT",
                format!("--server {base:?}: expected an http:// or https:// URL"),
            ));
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| CliError::new("INTERNAL", e.to_string()))?;
        Ok(Self {
            base,
            token: std::env::var("RDQ_TOKEN").ok().filter(|t| !t.is_empty()),
            http,
        })
    }

    fn builder(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        req
    }

    /// Sends a request and returns the response when it succeeded; a
    /// problem document becomes a `CliError` with its code.
    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<reqwest::Response, CliError> {
        let mut req = self.builder(method, path);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let response = req.send().await.map_err(|e| self.unreachable(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let bytes = response.bytes().await.unwrap_or_default();
        Err(problem(status, &bytes))
    }

    async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<reqwest::Response, CliError> {
        self.builder(method, path)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Vec<u8>), CliError> {
        let response = self.request(method, path, body).await?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        Ok((status, bytes.to_vec()))
    }

    fn unreachable(&self, e: &reqwest::Error) -> CliError {
        let mut why = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            why = format!("{why}: {s}");
            source = s.source();
        }
        CliError::new(
            "SERVER_UNREACHABLE",
            format!(
                "{}: {why} (is `rdq serve` running? --server / RDQ_SERVER)",
                self.base
            ),
        )
    }
}

fn problem(status: StatusCode, bytes: &[u8]) -> CliError {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    match (v["code"].as_str(), v["detail"].as_str()) {
        (Some(code), Some(detail)) => CliError::new(code, detail),
        _ => CliError::new(
            "HTTP_ERROR",
            format!(
                "the server answered {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ),
        ),
    }
}

fn encode_query(pairs: &[(&str, String)]) -> String {
    let mut url = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        url.append_pair(k, v);
    }
    url.finish()
}

fn decode(bytes: &[u8]) -> Result<Envelope, CliError> {
    Envelope::decode(bytes).map_err(CliError::from)
}

fn json_of(bytes: &[u8]) -> Result<Value, CliError> {
    serde_json::from_slice(bytes).map_err(|e| {
        CliError::new(
            "BAD_RESPONSE",
            format!("the server's answer is not JSON: {e}"),
        )
    })
}

fn parse_id(id: &str) -> Result<TaskId, CliError> {
    TaskId::parse(id).ok_or_else(|| {
        CliError::new(
            "INVALID_ARGUMENT",
            format!("{id:?} is not a task id (a 26-character ULID)"),
        )
    })
}

/// Whether `queue` (a valid name, else `INVALID_QUEUE_NAME`) exists in the store.
async fn queue_known(engine: &Engine, queue: &str) -> Result<bool, CliError> {
    rdq_envelope::validate_queue_name(queue)?;
    dead_letters::queue_exists(engine, queue)
        .await
        .map_err(engine_err)
}

/// `queue` must exist in the store: `QUEUE_NOT_FOUND` otherwise.
async fn require_queue(engine: &Engine, queue: &str) -> Result<(), CliError> {
    if queue_known(engine, queue).await? {
        Ok(())
    } else {
        Err(not_found(queue))
    }
}

fn not_found(queue: &str) -> CliError {
    CliError::new(
        "QUEUE_NOT_FOUND",
        format!("no queue {queue:?}: it has no tasks and no stored policy"),
    )
}

fn engine_err(e: EngineError) -> CliError {
    let text = e.to_string();
    let message = text
        .strip_prefix(e.code())
        .and_then(|r| r.strip_prefix(": "))
        .unwrap_or(&text)
        .to_owned();
    CliError::new(e.code(), message)
}

fn api(e: rdq_server::ApiError) -> CliError {
    CliError::new(e.code(), e.detail())
}
