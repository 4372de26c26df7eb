//! A typed Rust client of rdq's HTTP API (`rdq serve`, `docs/http-api.md`):
//! what a Rust program calls to talk to a remote server, and what the `rdq`
//! CLI's `--server` path and the server's end-to-end tests use.
//!
//! The request and response types are `rdq_api`'s, the very ones the server
//! parses and writes, so the two cannot disagree on a field. Envelopes come
//! back decoded and checked by `rdq_envelope`, byte for byte what the server
//! stored. Every refusal is a [`ClientError`] carrying the server's stable
//! code (`LEASE_LOST`, `QUEUE_NOT_FOUND`, …), so callers branch on meaning.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rdq_client::ClientError> {
//! let client = rdq_client::Client::new("http://127.0.0.1:7480", None)?;
//! let body = rdq_api::tasks::SubmitBody {
//!     queue: "emails".into(),
//!     handler_ref: "send-email".into(),
//!     ..Default::default()
//! };
//! let (_created, task) = client.submit(&body).await?;
//! println!("{}", task.id);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod schedules;
mod sources;

use rdq_api::dlq::{
    DlqPage, ImportResult, LineError, PageQuery, PurgeResult, ReasonsResult, RedriveBody,
    RedriveResult,
};
use rdq_api::flow::{QueueFlow, ThrottleBody};
use rdq_api::queues::{CapabilityList, QueueList, QueueRow};
use rdq_api::tasks::{
    CancelBody, CancelResult, SubmitBatchBody, SubmitBatchResponse, SubmitBody, TaskPageQuery,
};
use rdq_api::work::{
    ClaimBody, ClaimResponse, ExtendBody, SettleBatchBody, SettleBatchResponse, SettleBody,
};
use rdq_api::{Problem, RawEnvelope};
use rdq_envelope::{Envelope, TaskId};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a call failed: the server's problem document, or why it could not
/// be reached or understood.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct ClientError {
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// rdq's stable code (`SERVER_UNREACHABLE` and `BAD_RESPONSE` are the
    /// client's own).
    pub code: String,
    /// What went wrong, for people.
    pub detail: String,
    /// The whole problem document, when the server sent one.
    pub problem: Option<Box<Problem>>,
}

impl ClientError {
    fn new(code: &str, detail: impl Into<String>) -> Self {
        Self {
            status: None,
            code: code.to_owned(),
            detail: detail.into(),
            problem: None,
        }
    }

    /// The bad lines of an `INVALID_IMPORT` refusal, with the total count.
    pub fn import_errors(&self) -> Option<(Vec<LineError>, usize)> {
        let problem = self.problem.as_ref()?;
        let errors: Vec<LineError> =
            serde_json::from_value(problem.extensions.get("errors")?.clone()).ok()?;
        let total = problem
            .extensions
            .get("error_count")
            .and_then(Value::as_u64)
            .map_or(errors.len(), |n| usize::try_from(n).unwrap_or(usize::MAX));
        Some((errors, total))
    }
}

/// A claimed task, decoded.
#[derive(Debug, Clone)]
pub struct ClaimedTask {
    /// The task as claimed: IN_FLIGHT.
    pub envelope: Envelope,
    /// Present it to settle or extend.
    pub lease_token: String,
}

/// A client of one server. Cheap to clone; connections are reused.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server at `base` (`http://host:port`), sending
    /// `token` as a bearer token when given.
    pub fn new(base: &str, token: Option<String>) -> Result<Self, ClientError> {
        Self::build(base, token, reqwest::Client::builder())
    }

    /// A client of an `https://` server whose certificate a private CA
    /// issued: trusts only the CA certificates in `ca_pem` (PEM), not the
    /// system's roots (`docs/deployment.md`). Refuses a PEM text without a
    /// certificate with `INVALID_ARGUMENT`.
    #[cfg(feature = "https")]
    pub fn with_ca_pem(
        base: &str,
        token: Option<String>,
        ca_pem: &[u8],
    ) -> Result<Self, ClientError> {
        let certs = reqwest::Certificate::from_pem_bundle(ca_pem).map_err(|e| {
            ClientError::new("INVALID_ARGUMENT", format!("the CA file is not PEM: {e}"))
        })?;
        if certs.is_empty() {
            return Err(ClientError::new(
                "INVALID_ARGUMENT",
                "the CA file holds no PEM certificate",
            ));
        }
        Self::build(
            base,
            token,
            reqwest::Client::builder().tls_certs_only(certs),
        )
    }

    fn build(
        base: &str,
        token: Option<String>,
        builder: reqwest::ClientBuilder,
    ) -> Result<Self, ClientError> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::new(
                "INVALID_ARGUMENT",
                format!("{base:?}: expected an http:// or https:// URL"),
            ));
        }
        let http = builder
            .no_proxy()
            .build()
            .map_err(|e| ClientError::new("INTERNAL", e.to_string()))?;
        Ok(Self { base, token, http })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/tasks`: `(true, task)` when created, `(false, original)`
    /// for an idempotent repeat.
    pub async fn submit(&self, body: &SubmitBody) -> Result<(bool, Envelope), ClientError> {
        let response = self.call(Method::POST, "/v1/tasks", Some(body)).await?;
        let created = response.status() == StatusCode::CREATED;
        Ok((created, decode(&self.bytes(response).await?)?))
    }

    /// `POST /v1/tasks/batch`: one result per body, in order.
    pub async fn submit_batch(
        &self,
        bodies: &[SubmitBody],
    ) -> Result<Vec<Result<(bool, Envelope), ClientError>>, ClientError> {
        let tasks = bodies
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::new("INVALID_ARGUMENT", e.to_string()))?;
        let answer: SubmitBatchResponse = self
            .json(
                Method::POST,
                "/v1/tasks/batch",
                Some(&SubmitBatchBody { tasks }),
            )
            .await?;
        Ok(answer
            .results
            .into_iter()
            .map(|r| match r.envelope {
                Some(env) if r.status < 300 => Ok((r.status == 201, decode_raw(&env)?)),
                _ => Err(item_error(r.status, r.code, r.detail)),
            })
            .collect())
    }

    /// `GET /v1/tasks/{id}`.
    pub async fn task(&self, id: TaskId) -> Result<Envelope, ClientError> {
        self.envelope(Method::GET, &format!("/v1/tasks/{id}"), None::<&()>)
            .await
    }

    /// `POST /v1/queues/{queue}/cancel`.
    pub async fn cancel_tasks(
        &self,
        queue: &str,
        body: &CancelBody,
    ) -> Result<CancelResult, ClientError> {
        self.json(
            Method::POST,
            &format!("/v1/queues/{queue}/cancel"),
            Some(body),
        )
        .await
    }

    /// `GET /v1/queues/{queue}/tasks`: a page of tasks and the next cursor.
    pub async fn tasks_page(
        &self,
        queue: &str,
        page: &TaskPageQuery,
    ) -> Result<(Vec<Envelope>, Option<String>), ClientError> {
        let pairs: Vec<(&str, String)> = [
            ("status", page.status.clone()),
            ("handler_ref", page.handler_ref.clone()),
            ("header", page.header.clone()),
            ("limit", page.limit.map(|l| l.to_string())),
            ("cursor", page.cursor.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        let answer: DlqPage = self
            .json(
                Method::GET,
                &format!("/v1/queues/{queue}/tasks?{}", query(&pairs)),
                None::<&()>,
            )
            .await?;
        page_of(answer)
    }

    /// `DELETE /v1/tasks/{id}`.
    pub async fn delete_task(&self, id: TaskId) -> Result<(), ClientError> {
        self.call(Method::DELETE, &format!("/v1/tasks/{id}"), None::<&()>)
            .await
            .map(drop)
    }

    /// `GET /v1/queues`, only `names` when given.
    pub async fn queues(&self, names: &[String]) -> Result<Vec<QueueRow>, ClientError> {
        let path = if names.is_empty() {
            "/v1/queues".to_owned()
        } else {
            format!("/v1/queues?{}", query(&[("names", names.join(","))]))
        };
        let list: QueueList = self.json(Method::GET, &path, None::<&()>).await?;
        Ok(list.queues)
    }

    /// `GET /v1/capabilities`.
    pub async fn capabilities(&self) -> Result<CapabilityList, ClientError> {
        self.json(Method::GET, "/v1/capabilities", None::<&()>)
            .await
    }

    /// `GET /v1/queues/{queue}/config`: the live policy document.
    pub async fn queue_config(&self, queue: &str) -> Result<Value, ClientError> {
        self.json(
            Method::GET,
            &format!("/v1/queues/{queue}/config"),
            None::<&()>,
        )
        .await
    }

    /// `PUT /v1/queues/{queue}/config` with a partial document; the new policy.
    pub async fn set_queue_config(&self, queue: &str, patch: &Value) -> Result<Value, ClientError> {
        self.json(
            Method::PUT,
            &format!("/v1/queues/{queue}/config"),
            Some(patch),
        )
        .await
    }

    /// `GET /v1/queues/{queue}/flow`: the queue's flow limits and status.
    pub async fn queue_flow(&self, queue: &str) -> Result<QueueFlow, ClientError> {
        self.json(
            Method::GET,
            &format!("/v1/queues/{queue}/flow"),
            None::<&()>,
        )
        .await
    }

    /// `POST /v1/queues/{queue}/throttle`: throttles a flow key (or the
    /// queue); the flow status after it.
    pub async fn throttle(
        &self,
        queue: &str,
        body: &ThrottleBody,
    ) -> Result<QueueFlow, ClientError> {
        self.json(
            Method::POST,
            &format!("/v1/queues/{queue}/throttle"),
            Some(body),
        )
        .await
    }

    /// `POST /v1/queues/{queue}/claim`.
    pub async fn claim(
        &self,
        queue: &str,
        max: usize,
        lease_ms: Option<u64>,
    ) -> Result<Vec<ClaimedTask>, ClientError> {
        let answer: ClaimResponse = self
            .json(
                Method::POST,
                &format!("/v1/queues/{queue}/claim"),
                Some(&ClaimBody { max, lease_ms }),
            )
            .await?;
        answer
            .tasks
            .into_iter()
            .map(|t| {
                Ok(ClaimedTask {
                    envelope: decode_raw(&t.envelope)?,
                    lease_token: t.lease_token,
                })
            })
            .collect()
    }

    /// `POST /v1/tasks/{id}/settle`: the task's new state.
    pub async fn settle(&self, id: TaskId, body: &SettleBody) -> Result<Envelope, ClientError> {
        self.envelope(Method::POST, &format!("/v1/tasks/{id}/settle"), Some(body))
            .await
    }

    /// `POST /v1/settle`: one result per settle (each naming its `id`), in order.
    pub async fn settle_batch(
        &self,
        settles: &[SettleBody],
    ) -> Result<Vec<Result<Envelope, ClientError>>, ClientError> {
        let settles = settles
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::new("INVALID_ARGUMENT", e.to_string()))?;
        let answer: SettleBatchResponse = self
            .json(
                Method::POST,
                "/v1/settle",
                Some(&SettleBatchBody {
                    settles,
                    envelopes: None,
                }),
            )
            .await?;
        Ok(answer
            .results
            .into_iter()
            .map(|r| match r.envelope {
                Some(env) if r.status == 200 => decode_raw(&env),
                _ => Err(item_error(r.status, r.code, r.detail)),
            })
            .collect())
    }

    /// `POST /v1/tasks/{id}/lease`: the task with its new lease deadline.
    pub async fn extend_lease(
        &self,
        id: TaskId,
        lease_token: &str,
        extend_ms: u64,
    ) -> Result<Envelope, ClientError> {
        let body = ExtendBody {
            lease_token: lease_token.to_owned(),
            extend_ms,
        };
        self.envelope(Method::POST, &format!("/v1/tasks/{id}/lease"), Some(&body))
            .await
    }

    /// `GET /v1/queues/{queue}/dead`: a page, newest first, and the next cursor.
    pub async fn dlq_page(
        &self,
        queue: &str,
        page: &PageQuery,
    ) -> Result<(Vec<Envelope>, Option<String>), ClientError> {
        let mut pairs = Vec::new();
        if let Some(l) = page.limit {
            pairs.push(("limit", l.to_string()));
        }
        if let Some(c) = &page.cursor {
            pairs.push(("cursor", c.clone()));
        }
        if let Some(g) = &page.error_type {
            pairs.push(("error_type", g.clone()));
        }
        if let Some(r) = &page.reason {
            pairs.push(("reason", r.clone()));
        }
        let answer: DlqPage = self
            .json(
                Method::GET,
                &format!("/v1/queues/{queue}/dead?{}", query(&pairs)),
                None::<&()>,
            )
            .await?;
        page_of(answer)
    }

    /// `GET /v1/queues/{queue}/dead/{id}`.
    pub async fn dlq_task(&self, queue: &str, id: TaskId) -> Result<Envelope, ClientError> {
        self.envelope(
            Method::GET,
            &format!("/v1/queues/{queue}/dead/{id}"),
            None::<&()>,
        )
        .await
    }

    /// `GET /v1/queues/{queue}/dead/reasons`: dead tasks counted by reason.
    pub async fn dlq_reasons(&self, queue: &str) -> Result<ReasonsResult, ClientError> {
        self.json(
            Method::GET,
            &format!("/v1/queues/{queue}/dead/reasons"),
            None::<&()>,
        )
        .await
    }

    /// `POST /v1/queues/{queue}/dead/redrive`.
    pub async fn dlq_redrive(
        &self,
        queue: &str,
        body: &RedriveBody,
    ) -> Result<RedriveResult, ClientError> {
        self.json(
            Method::POST,
            &format!("/v1/queues/{queue}/dead/redrive"),
            Some(body),
        )
        .await
    }

    /// `GET /v1/queues/{queue}/dead/export`: hands each chunk of JSONL to
    /// `sink` as it arrives; returns the number of envelopes (lines).
    pub async fn dlq_export(
        &self,
        queue: &str,
        error_type: Option<&str>,
        reason: Option<&str>,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, ClientError> {
        let mut path = format!("/v1/queues/{queue}/dead/export");
        let filters: Vec<(&str, String)> = [("error_type", error_type), ("reason", reason)]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v.to_owned())))
            .collect();
        if !filters.is_empty() {
            path.push('?');
            path.push_str(&query(&filters));
        }
        let mut response = self.call(Method::GET, &path, None::<&()>).await?;
        let mut lines = 0u64;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    sink(&chunk).map_err(|e| ClientError::new("IO_ERROR", e.to_string()))?;
                    lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
                }
                Ok(None) => return Ok(lines),
                Err(e) => {
                    return Err(ClientError::new(
                        "EXPORT_INCOMPLETE",
                        format!("the export broke off after {lines} envelopes: {e}"),
                    ));
                }
            }
        }
    }

    /// `POST /v1/queues/{queue}/dead/import`: all or nothing; an
    /// `INVALID_IMPORT` refusal lists the bad lines
    /// ([`ClientError::import_errors`]).
    pub async fn dlq_import(
        &self,
        queue: &str,
        jsonl: Vec<u8>,
        dry_run: bool,
    ) -> Result<ImportResult, ClientError> {
        let request = self
            .builder(
                Method::POST,
                &format!("/v1/queues/{queue}/dead/import?dry_run={dry_run}"),
            )
            .header("content-type", "application/x-ndjson")
            .body(jsonl);
        let response = self.checked(request.send().await).await?;
        parse(&self.bytes(response).await?)
    }

    /// `DELETE /v1/queues/{queue}/dead`.
    pub async fn dlq_purge(&self, queue: &str, dry_run: bool) -> Result<PurgeResult, ClientError> {
        self.json(
            Method::DELETE,
            &format!("/v1/queues/{queue}/dead?dry_run={dry_run}"),
            None::<&()>,
        )
        .await
    }

    /// `GET /readyz`: `Ok` when the server is ready.
    pub async fn ready(&self) -> Result<(), ClientError> {
        self.call(Method::GET, "/readyz", None::<&()>)
            .await
            .map(drop)
    }

    fn builder(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        req
    }

    async fn call<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<reqwest::Response, ClientError> {
        let mut req = self.builder(method, path);
        if let Some(b) = body {
            req = req.json(b);
        }
        self.checked(req.send().await).await
    }

    async fn checked(
        &self,
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<reqwest::Response, ClientError> {
        let response = sent.map_err(|e| self.unreachable(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let bytes = response.bytes().await.unwrap_or_default();
        Err(problem(status, &bytes))
    }

    async fn bytes(&self, response: reqwest::Response) -> Result<Vec<u8>, ClientError> {
        response
            .bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(|e| self.unreachable(&e))
    }

    async fn json<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let response = self.call(method, path, body).await?;
        parse(&self.bytes(response).await?)
    }

    async fn envelope<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<Envelope, ClientError> {
        let response = self.call(method, path, body).await?;
        decode(&self.bytes(response).await?)
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        let mut why = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            why = format!("{why}: {s}");
            source = s.source();
        }
        ClientError::new("SERVER_UNREACHABLE", format!("{}: {why}", self.base))
    }
}

fn problem(status: StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<Problem>(bytes) {
        Ok(p) => ClientError {
            status: Some(status.as_u16()),
            code: p.code.clone(),
            detail: p.detail.clone(),
            problem: Some(Box::new(p)),
        },
        Err(_) => ClientError {
            status: Some(status.as_u16()),
            code: "HTTP_ERROR".to_owned(),
            detail: format!(
                "the server answered {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ),
            problem: None,
        },
    }
}

fn item_error(status: u16, code: Option<String>, detail: Option<String>) -> ClientError {
    ClientError {
        status: Some(status),
        code: code.unwrap_or_else(|| "BAD_RESPONSE".to_owned()),
        detail: detail.unwrap_or_default(),
        problem: None,
    }
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ClientError::new(
            "BAD_RESPONSE",
            format!("the server's answer is not what the API promises: {e}"),
        )
    })
}

fn decode(bytes: &[u8]) -> Result<Envelope, ClientError> {
    Envelope::decode(bytes).map_err(|e| ClientError::new(e.code().as_str(), e.to_string()))
}

fn decode_raw(raw: &RawEnvelope) -> Result<Envelope, ClientError> {
    decode(raw.get().as_bytes())
}

/// The envelopes of a page of tasks, decoded, and its next cursor.
fn page_of(answer: DlqPage) -> Result<(Vec<Envelope>, Option<String>), ClientError> {
    let items = answer
        .items
        .iter()
        .map(decode_raw)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((items, answer.next_cursor))
}

fn query(pairs: &[(&str, String)]) -> String {
    let mut url = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        url.append_pair(k, v);
    }
    url.finish()
}
