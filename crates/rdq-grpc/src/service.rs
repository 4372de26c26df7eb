//! `rdq.v1.Tasks`, `Queues`, `Dlq` and `Workers`: each method translates
//! its message into the application layer's use case and the answer back,
//! like the HTTP handlers do (`docs/grpc.md`). Nothing here decides.

use std::collections::BTreeMap;
use std::pin::Pin;

use base64::Engine as _;
use futures::{Stream, StreamExt as _};
use rdq_api::tasks::SubmitBody;
use rdq_api::work::{ReportedError, ReportedOutcome, SettleBody};
use rdq_app::dlq::RedriveFilter;
use rdq_app::work::{MAX_SETTLE_BATCH, Settle, settlement};
use rdq_app::{App, AppError, Caller};
use rdq_engine::Submitted;
use rdq_envelope::{Envelope, TaskId};
use serde_json::Value;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use crate::codec;
use crate::pb;
use crate::status::{problem, to_status};
use crate::wire::WorkOut;

/// Metadata a client may send instead of a submit's `idempotency_key`.
pub const IDEMPOTENCY_KEY_METADATA: &str = "idempotency-key";

/// Most entries of one DLQ import stream (as many lines as an HTTP import
/// of `max_import_bytes` could hold is not knowable here; this bounds memory).
pub const MAX_IMPORT_ENTRIES: usize = 1_000_000;

/// Most bytes of one DLQ import stream, summed over its envelopes.
pub const MAX_IMPORT_BYTES: usize = 1024 * 1024 * 1024;

/// The services over one application. Cheap to clone.
#[derive(Clone)]
pub struct GrpcApi {
    app: App,
}

impl GrpcApi {
    /// The services over `app`.
    pub fn new(app: App) -> Self {
        Self { app }
    }

    /// The application layer.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// A `Work` stream for `request`, after its caller is authenticated.
    pub async fn work_stream(
        &self,
        request: Request<Streaming<pb::WorkRequest>>,
    ) -> Result<BoxStream<WorkOut>, Status> {
        let caller = self.caller(request.metadata())?;
        crate::work::start(self.app.clone(), caller, request.into_inner()).await
    }

    /// The caller behind a request's `authorization` metadata.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        self.app
            .authenticate(metadata.get("authorization").map(|v| v.as_bytes()))
            .map_err(|e| to_status(&e))
    }
}

/// An application error as a status.
fn st(e: AppError) -> Status {
    to_status(&e)
}

/// A task id, refused with `INVALID_ARGUMENT` as over HTTP.
pub fn parse_id(text: &str) -> Result<TaskId, AppError> {
    TaskId::parse(text).ok_or_else(|| {
        AppError::invalid_argument(format!("{text:?} is not a task id (a 26-character ULID)"))
    })
}

/// A message's envelope field.
pub fn envelope(env: &Envelope) -> Option<pb::Envelope> {
    Some(codec::to_proto(env))
}

fn task_response(env: &Envelope) -> pb::TaskResponse {
    pb::TaskResponse {
        envelope: envelope(env),
    }
}

/// The HTTP submit body a message stands for.
pub fn submit_body(
    msg: pb::SubmitRequest,
    metadata: Option<&MetadataMap>,
) -> Result<SubmitBody, AppError> {
    let priority = u8::try_from(msg.priority)
        .map_err(|_| AppError::malformed(format!("priority: {} is over 255", msg.priority)))?;
    let mut headers: BTreeMap<String, String> = msg.headers.into_iter().collect();
    let mut idempotency_key = msg.idempotency_key;
    if let Some(md) = metadata {
        if !headers.contains_key("traceparent")
            && let Some(tp) = md.get("traceparent").and_then(|v| v.to_str().ok())
        {
            headers.insert("traceparent".to_owned(), tp.to_owned());
        }
        if idempotency_key.is_none()
            && let Some(k) = md
                .get(IDEMPOTENCY_KEY_METADATA)
                .and_then(|v| v.to_str().ok())
        {
            idempotency_key = Some(k.to_owned());
        }
    }
    Ok(SubmitBody {
        queue: msg.queue,
        handler_ref: msg.handler_ref,
        handler_version: msg.handler_version,
        payload: (!msg.payload.is_empty())
            .then(|| base64::engine::general_purpose::STANDARD.encode(&msg.payload)),
        payload_json: None,
        payload_content_type: msg.payload_content_type,
        headers,
        delay_ms: msg.delay_ms,
        priority,
        idempotency_key,
    })
}

/// The settle a message stands for.
pub fn settle_of(msg: pb::SettleRequest) -> Result<Settle, AppError> {
    let id = parse_id(&msg.id)?;
    let outcome = match pb::ReportedOutcome::try_from(msg.outcome) {
        Ok(pb::ReportedOutcome::ReportedSuccess) => ReportedOutcome::Success,
        Ok(pb::ReportedOutcome::ReportedRetryableFailure) => ReportedOutcome::RetryableFailure,
        Ok(pb::ReportedOutcome::ReportedPermanentFailure) => ReportedOutcome::PermanentFailure,
        Ok(pb::ReportedOutcome::ReportedFailure) => ReportedOutcome::Failure,
        Ok(pb::ReportedOutcome::ReportedDefer) => ReportedOutcome::Defer,
        Ok(pb::ReportedOutcome::ReportedRelease) => ReportedOutcome::Release,
        _ => {
            return Err(AppError::invalid_field(
                "outcome",
                "is not a reported outcome",
            ));
        }
    };
    let error = match msg.error {
        None => None,
        Some(e) => Some(ReportedError {
            error_type: e.r#type,
            message: e.message,
            detail: match e.detail_json {
                None => None,
                Some(text) => Some(rdq_envelope::parse_strict(text.as_bytes()).map_err(|err| {
                    AppError::malformed(format!("error.detail_json: {}", err.message()))
                })?),
            },
            stack: e.stack,
        }),
    };
    let body = SettleBody {
        id: None,
        lease_token: msg.lease_token,
        outcome,
        error,
        defer_ms: msg.defer_ms,
    };
    Ok(Settle {
        id,
        settlement: settlement(&body)?,
        lease_token: body.lease_token,
    })
}

/// One item's result of a batch settle.
pub fn settle_item(id: String, result: Result<Envelope, AppError>) -> pb::SettleItemResult {
    settle_result(id, result, true)
}

/// The result of one settle or extension, with the new envelope or (for a
/// Work stream's bare acks) without it.
pub fn settle_result(
    id: String,
    result: Result<Envelope, AppError>,
    with_envelope: bool,
) -> pb::SettleItemResult {
    match result {
        Ok(env) => pb::SettleItemResult {
            id,
            envelope: if with_envelope { envelope(&env) } else { None },
            problem: None,
        },
        Err(e) => pb::SettleItemResult {
            id,
            envelope: None,
            problem: Some(problem(&e)),
        },
    }
}

/// Settles `items` as `caller`, one result per item in order.
pub async fn settle_items(
    app: &App,
    caller: &Caller,
    items: Vec<pb::SettleRequest>,
    with_envelopes: bool,
) -> Vec<pb::SettleItemResult> {
    let ids: Vec<String> = items.iter().map(|s| s.id.clone()).collect();
    let settles = items.into_iter().map(settle_of).collect();
    let settled = app.settle_many(caller, settles).await;
    ids.into_iter()
        .zip(settled)
        .map(|(id, r)| settle_result(id, r, with_envelopes))
        .collect()
}

/// The leased-task message of a claim.
pub fn leased(l: rdq_app::work::Leased) -> pb::LeasedTask {
    let envelope = codec::into_proto(l.envelope);
    pb::LeasedTask {
        id: envelope.id.clone(),
        lease_token: l.lease_token,
        envelope: Some(envelope),
    }
}

#[tonic::async_trait]
impl pb::tasks_server::Tasks for GrpcApi {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let (metadata, _, msg) = request.into_parts();
        let body = submit_body(msg, Some(&metadata)).map_err(st)?;
        let (env, created) = match self.app.submit(&caller, body).await.map_err(st)? {
            Submitted::Created(env) => (env, true),
            Submitted::Existing(env) => (env, false),
        };
        Ok(Response::new(pb::SubmitResponse {
            envelope: envelope(&env),
            created,
        }))
    }

    async fn submit_batch(
        &self,
        request: Request<pb::SubmitBatchRequest>,
    ) -> Result<Response<pb::SubmitBatchResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let (metadata, _, msg) = request.into_parts();
        if msg.tasks.len() > rdq_api::MAX_SUBMIT_BATCH {
            return Err(st(AppError::invalid_field(
                "tasks",
                format!("at most {} items", rdq_api::MAX_SUBMIT_BATCH),
            )));
        }
        // As over HTTP: a traceparent applies to every item without one; an
        // idempotency key in metadata does not apply to batches.
        let tp = metadata
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bodies = msg
            .tasks
            .into_iter()
            .map(|mut t| {
                if let Some(tp) = &tp {
                    t.headers
                        .entry("traceparent".to_owned())
                        .or_insert_with(|| tp.clone());
                }
                submit_body(t, None)
            })
            .collect();
        let results = self
            .app
            .submit_many(&caller, bodies)
            .await
            .into_iter()
            .map(|r| match r {
                Ok(Submitted::Created(env)) => pb::SubmitItemResult {
                    envelope: envelope(&env),
                    created: true,
                    problem: None,
                },
                Ok(Submitted::Existing(env)) => pb::SubmitItemResult {
                    envelope: envelope(&env),
                    created: false,
                    problem: None,
                },
                Err(e) => pb::SubmitItemResult {
                    envelope: None,
                    created: false,
                    problem: Some(problem(&e)),
                },
            })
            .collect();
        Ok(Response::new(pb::SubmitBatchResponse { results }))
    }

    async fn get(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::TaskResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let id = parse_id(&request.get_ref().id).map_err(st)?;
        let env = self.app.task(&caller, id).await.map_err(st)?;
        Ok(Response::new(task_response(&env)))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteTaskRequest>,
    ) -> Result<Response<pb::DeleteTaskResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let id = parse_id(&request.get_ref().id).map_err(st)?;
        self.app.delete_task(&caller, id).await.map_err(st)?;
        Ok(Response::new(pb::DeleteTaskResponse {}))
    }
}

fn policy_response(
    app: &App,
    policy: &impl serde::Serialize,
) -> Result<pb::QueueConfigResponse, Status> {
    let policy_json = serde_json::to_string(policy).map_err(|e| {
        st(AppError::internal(format!(
            "the policy did not serialise: {e}"
        )))
    })?;
    Ok(pb::QueueConfigResponse {
        policy_json,
        process_scope: app.config_is_local(),
    })
}

#[tonic::async_trait]
impl pb::queues_server::Queues for GrpcApi {
    async fn list(
        &self,
        request: Request<pb::ListQueuesRequest>,
    ) -> Result<Response<pb::ListQueuesResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let rows = self
            .app
            .queues(&caller, &request.get_ref().names)
            .await
            .map_err(st)?;
        let queues = rows
            .into_iter()
            .map(|r| pb::QueueRow {
                queue: r.queue,
                pending: r.pending,
                in_flight: r.in_flight,
                succeeded: r.succeeded,
                dead: r.dead,
                source: match r.source {
                    rdq_api::queues::StatsSource::Counts => "counts".to_owned(),
                    rdq_api::queues::StatsSource::Depths => "depths".to_owned(),
                },
            })
            .collect();
        Ok(Response::new(pb::ListQueuesResponse { queues }))
    }

    async fn get_config(
        &self,
        request: Request<pb::GetConfigRequest>,
    ) -> Result<Response<pb::QueueConfigResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let policy = self
            .app
            .queue_config(&caller, &request.get_ref().queue)
            .await
            .map_err(st)?;
        Ok(Response::new(policy_response(&self.app, &policy)?))
    }

    async fn put_config(
        &self,
        request: Request<pb::PutConfigRequest>,
    ) -> Result<Response<pb::QueueConfigResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let mut patch = rdq_envelope::parse_strict(msg.patch_json.as_bytes()).map_err(|e| {
            st(AppError::malformed(format!(
                "patch_json is not JSON: {}",
                e.message()
            )))
        })?;
        rdq_api::int::normalize_integers(&mut patch, &["equals", "not_equals"]);
        let next = self
            .app
            .set_queue_config(&caller, &msg.queue, &patch)
            .await
            .map_err(st)?;
        Ok(Response::new(policy_response(&self.app, &next)?))
    }

    async fn capabilities(
        &self,
        request: Request<pb::CapabilitiesRequest>,
    ) -> Result<Response<pb::CapabilitiesResponse>, Status> {
        self.caller(request.metadata())?;
        let capabilities = self
            .app
            .capabilities()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        Ok(Response::new(pb::CapabilitiesResponse { capabilities }))
    }
}

/// A boxed stream of messages, as the streaming methods return.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::dlq_server::Dlq for GrpcApi {
    async fn list(
        &self,
        request: Request<pb::DlqListRequest>,
    ) -> Result<Response<pb::DlqListResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let cursor = msg
            .cursor
            .as_deref()
            .map(parse_id)
            .transpose()
            .map_err(st)?;
        let limit = msg.limit.map_or(rdq_api::DEFAULT_PAGE, |l| l as usize);
        let page = self
            .app
            .dlq_page(&caller, &msg.queue, msg.error_type, cursor, limit)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::DlqListResponse {
            items: page.items.iter().map(codec::to_proto).collect(),
            next_cursor: page.next_cursor.map(|c| c.to_string()),
        }))
    }

    async fn show(
        &self,
        request: Request<pb::DlqShowRequest>,
    ) -> Result<Response<pb::TaskResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let id = parse_id(&msg.id).map_err(st)?;
        let env = self
            .app
            .dlq_task(&caller, &msg.queue, id)
            .await
            .map_err(st)?;
        Ok(Response::new(task_response(&env)))
    }

    async fn redrive(
        &self,
        request: Request<pb::RedriveRequest>,
    ) -> Result<Response<pb::RedriveResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let ids = if msg.ids.is_empty() {
            None
        } else {
            let mut ids = Vec::with_capacity(msg.ids.len());
            for (i, id) in msg.ids.iter().enumerate() {
                ids.push(TaskId::parse(id).ok_or_else(|| {
                    st(AppError::invalid_field(
                        &format!("ids[{i}]"),
                        "is not a task id",
                    ))
                })?);
            }
            Some(ids)
        };
        let limit = msg.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let result = self
            .app
            .dlq_redrive(
                &caller,
                &msg.queue,
                RedriveFilter {
                    ids,
                    error_type: msg.error_type,
                    limit,
                    dry_run: msg.dry_run,
                },
            )
            .await
            .map_err(st)?;
        Ok(Response::new(pb::RedriveResponse {
            queue: result.queue,
            dry_run: result.dry_run,
            count: result.count as u64,
            ids: result.ids,
        }))
    }

    type ExportStream = BoxStream<pb::TaskResponse>;

    async fn export(
        &self,
        request: Request<pb::ExportRequest>,
    ) -> Result<Response<Self::ExportStream>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        // Refuse before the stream starts if the caller, queue or filter is bad.
        let first = self
            .app
            .dlq_export_page(&caller, &msg.queue, msg.error_type.clone(), None)
            .await
            .map_err(st)?;
        let app = self.app.clone();
        let pages = futures::stream::unfold(
            (Some(first), app, caller, msg.queue, msg.error_type),
            |(page, app, caller, queue, error_type)| async move {
                let page = page?;
                let items: Vec<Result<pb::TaskResponse, Status>> =
                    page.items.iter().map(|e| Ok(task_response(e))).collect();
                let next = match page.next_cursor {
                    None => None,
                    Some(cursor) => match app
                        .dlq_export_page(&caller, &queue, error_type.clone(), Some(cursor))
                        .await
                    {
                        Ok(p) => Some(p),
                        Err(e) => {
                            tracing::error!(queue = %queue, error = %e, "DLQ export stopped");
                            let mut items = items;
                            items.push(Err(st(e)));
                            return Some((items, (None, app, caller, queue, error_type)));
                        }
                    },
                };
                Some((items, (next, app, caller, queue, error_type)))
            },
        );
        let stream = futures::StreamExt::flat_map(pages, futures::stream::iter);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn import(
        &self,
        request: Request<Streaming<pb::ImportRequest>>,
    ) -> Result<Response<pb::ImportResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let mut inbound = request.into_inner();
        let mut queue: Option<String> = None;
        let mut dry_run = false;
        let mut jsonl = Vec::new();
        // Entries that do not map onto JSON at all: (position, error).
        let mut unmappable: Vec<rdq_api::dlq::LineError> = Vec::new();
        let mut position = 0usize;
        while let Some(msg) = futures::StreamExt::next(&mut inbound).await {
            let msg = msg?;
            position += 1;
            if position > MAX_IMPORT_ENTRIES || jsonl.len() > MAX_IMPORT_BYTES {
                return Err(st(AppError::new(
                    rdq_app::ErrorKind::TooLarge,
                    "PAYLOAD_TOO_LARGE",
                    format!(
                        "an import stream takes at most {MAX_IMPORT_ENTRIES} entries and {MAX_IMPORT_BYTES} bytes"
                    ),
                )));
            }
            if queue.is_none() {
                // Refused before the rest of the stream is read; the use
                // case checks again.
                caller
                    .require(rdq_app::Scope::Admin, &msg.queue)
                    .map_err(st)?;
                queue = Some(msg.queue.clone());
                dry_run = msg.dry_run;
            }
            if position > 1 {
                jsonl.push(b'\n');
            }
            match msg.entry {
                Some(pb::import_request::Entry::EnvelopeJson(bytes)) => {
                    if bytes.contains(&b'\n') {
                        unmappable.push(rdq_api::dlq::LineError {
                            line: position,
                            code: "MALFORMED_ENVELOPE".to_owned(),
                            message: "envelope_json holds a line break: one envelope per entry"
                                .to_owned(),
                        });
                    } else {
                        jsonl.extend_from_slice(&bytes);
                    }
                }
                Some(pb::import_request::Entry::Envelope(env)) => match codec::to_json(&env) {
                    Ok(bytes) => jsonl.extend_from_slice(&bytes),
                    Err(e) => unmappable.push(rdq_api::dlq::LineError {
                        line: position,
                        code: e.code().as_str().to_owned(),
                        message: match e.path() {
                            Some(p) => format!("{p}: {}", e.message()),
                            None => e.message().to_owned(),
                        },
                    }),
                },
                None => unmappable.push(rdq_api::dlq::LineError {
                    line: position,
                    code: "MALFORMED_ENVELOPE".to_owned(),
                    message: "the entry has no envelope".to_owned(),
                }),
            }
        }
        let queue = queue.unwrap_or_default();
        if !unmappable.is_empty() {
            // Check the rest without storing, then report every bad entry.
            let others = match self
                .app
                .dlq_import(&caller, &queue, &jsonl, true, |_| {})
                .await
            {
                Ok(_) => Vec::new(),
                Err(e) if e.code() == rdq_app::error::INVALID_IMPORT => e
                    .extensions()
                    .get("errors")
                    .cloned()
                    .and_then(|v| serde_json::from_value::<Vec<rdq_api::dlq::LineError>>(v).ok())
                    .unwrap_or_default(),
                Err(e) => return Err(st(e)),
            };
            let mut all = unmappable;
            all.extend(others);
            all.sort_by_key(|e| e.line);
            let shown: Vec<_> = all.iter().take(rdq_app::dlq::MAX_REPORTED_LINES).collect();
            return Err(st(AppError::new(
                rdq_app::ErrorKind::Invalid,
                rdq_app::error::INVALID_IMPORT,
                format!(
                    "{} entr(ies) cannot be imported (first: entry {}); nothing was imported",
                    all.len(),
                    all.first().map_or(0, |e| e.line)
                ),
            )
            .with("error_count", Value::from(all.len()))
            .with("errors", serde_json::to_value(shown).unwrap_or(Value::Null))));
        }
        let result = self
            .app
            .dlq_import(&caller, &queue, &jsonl, dry_run, |_| {})
            .await
            .map_err(st)?;
        Ok(Response::new(pb::ImportResponse {
            queue: result.queue,
            dry_run: result.dry_run,
            checked: result.checked,
            imported: result.imported,
        }))
    }

    async fn purge(
        &self,
        request: Request<pb::PurgeRequest>,
    ) -> Result<Response<pb::PurgeResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let result = self
            .app
            .dlq_purge(&caller, &msg.queue, msg.dry_run)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::PurgeResponse {
            queue: result.queue,
            dry_run: result.dry_run,
            purged: result.purged,
        }))
    }
}

#[tonic::async_trait]
impl pb::workers_server::Workers for GrpcApi {
    async fn claim(
        &self,
        request: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let claimed = self
            .app
            .claim(&caller, &msg.queue, msg.max as usize, msg.lease_ms)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::ClaimResponse {
            tasks: claimed.into_iter().map(leased).collect(),
        }))
    }

    async fn settle(
        &self,
        request: Request<pb::SettleRequest>,
    ) -> Result<Response<pb::TaskResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let settle = settle_of(request.into_inner()).map_err(st)?;
        let env = self.app.settle(&caller, settle).await.map_err(st)?;
        Ok(Response::new(task_response(&env)))
    }

    async fn settle_batch(
        &self,
        request: Request<pb::SettleBatchRequest>,
    ) -> Result<Response<pb::SettleBatchResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        if msg.settles.len() > MAX_SETTLE_BATCH {
            return Err(st(AppError::invalid_field(
                "settles",
                format!("at most {MAX_SETTLE_BATCH} items"),
            )));
        }
        let results = settle_items(&self.app, &caller, msg.settles, true).await;
        Ok(Response::new(pb::SettleBatchResponse { results }))
    }

    async fn extend_lease(
        &self,
        request: Request<pb::ExtendLeaseRequest>,
    ) -> Result<Response<pb::TaskResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let id = parse_id(&msg.id).map_err(st)?;
        let env = self
            .app
            .extend_lease(&caller, id, &msg.lease_token, msg.extend_ms)
            .await
            .map_err(st)?;
        Ok(Response::new(task_response(&env)))
    }

    type WorkStream = BoxStream<pb::WorkResponse>;

    async fn work(
        &self,
        request: Request<Streaming<pb::WorkRequest>>,
    ) -> Result<Response<Self::WorkStream>, Status> {
        // `grpc_router` routes this method to `wire::WorkMethod` with
        // `wire::WorkCodec`, which write the same messages without
        // building them; this is the way of whoever mounts the generated
        // server alone.
        let stream = self.work_stream(request).await?;
        Ok(Response::new(Box::pin(
            stream.map(|m| m.map(WorkOut::into_message)),
        )))
    }
}
