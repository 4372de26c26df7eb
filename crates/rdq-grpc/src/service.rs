//! `rdq.v1.Tasks`, `Queues`, `Dlq` and `Workers`: each method turns its
//! message into the application layer's command ([`crate::messages`]),
//! calls the use case, and turns the answer back, like the HTTP handlers
//! do (`docs/grpc.md`). The `Work` method hands its stream to
//! [`crate::work`]. Nothing here decides.

use futures::StreamExt as _;
use prost::Message as _;
use rdq_app::dlq::{DeadFilter, RedriveFilter};
use rdq_app::work::MAX_SETTLE_BATCH;
use rdq_app::{App, AppError, Caller};
use rdq_engine::Submitted;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use crate::messages::{
    envelope, import_entry, leased, parse_id, settle_of, settle_results, settles_of,
    submit_command, task_response,
};
use crate::status::{problem, to_status};
use crate::wire::WorkOut;
use crate::{BoxStream, codec, pb};

/// Most entries of one DLQ import stream (as many lines as an HTTP import
/// of `max_import_bytes` could hold is not knowable here; this bounds memory).
pub const MAX_IMPORT_ENTRIES: usize = 1_000_000;

/// Most bytes of one DLQ import stream, summed over its messages.
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

    /// The caller behind a request's `authorization` metadata.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        crate::messages::caller(&self.app, metadata)
    }
}

/// An application error as a status.
fn st(e: AppError) -> Status {
    to_status(&e)
}

#[tonic::async_trait]
impl pb::tasks_server::Tasks for GrpcApi {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let (metadata, _, msg) = request.into_parts();
        let command = submit_command(msg, Some(&metadata)).map_err(st)?;
        let (env, created) = match self.app.submit(&caller, command).await.map_err(st)? {
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
        let commands = msg
            .tasks
            .into_iter()
            .map(|mut t| {
                if let Some(tp) = &tp {
                    t.headers
                        .entry("traceparent".to_owned())
                        .or_insert_with(|| tp.clone());
                }
                submit_command(t, None)
            })
            .collect();
        let results = self
            .app
            .submit_many(&caller, commands)
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

    async fn list(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let status = match pb::Status::try_from(msg.status) {
            Ok(pb::Status::Unspecified) => None,
            Ok(s) => rdq_envelope::Status::parse(s.as_str_name()),
            Err(_) => {
                return Err(st(AppError::invalid_field("status", "is not a status")));
            }
        };
        let cursor = msg
            .cursor
            .as_deref()
            .map(parse_id)
            .transpose()
            .map_err(st)?;
        let filter = rdq_app::tasks::TaskFilter {
            status,
            handler_ref: msg.handler_ref,
            headers: msg.headers.into_iter().collect(),
        };
        let limit = msg.limit.map_or(rdq_api::DEFAULT_PAGE, |l| l as usize);
        let page = self
            .app
            .tasks_page(&caller, &msg.queue, filter, cursor, limit)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::ListTasksResponse {
            items: page.items.iter().map(codec::to_proto).collect(),
            next_cursor: page.next_cursor.map(|c| c.to_string()),
        }))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelTasksRequest>,
    ) -> Result<Response<pb::CancelTasksResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let body = rdq_api::tasks::CancelBody {
            ids: (!msg.ids.is_empty()).then_some(msg.ids),
            handler_ref: msg.handler_ref,
            headers: (!msg.headers.is_empty()).then(|| msg.headers.into_iter().collect()),
            older_than_ms: msg.older_than_ms,
            limit: msg.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
            dry_run: msg.dry_run,
            message: msg.message,
            pending_only: msg.pending_only,
        };
        let result = self
            .app
            .cancel_tasks(&caller, &msg.queue, body)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::CancelTasksResponse {
            queue: result.queue,
            dry_run: result.dry_run,
            count: result.count as u64,
            ids: result.ids,
            running: result.running,
        }))
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

    async fn get_flow(
        &self,
        request: Request<pb::GetFlowRequest>,
    ) -> Result<Response<pb::FlowResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let flow = self
            .app
            .flow_status(&caller, &request.get_ref().queue)
            .await
            .map_err(st)?;
        Ok(Response::new(crate::messages::flow_response(flow)))
    }

    async fn throttle(
        &self,
        request: Request<pb::ThrottleRequest>,
    ) -> Result<Response<pb::FlowResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let until = rdq_app::flow::throttle_until(
            msg.for_ms,
            msg.until.as_deref(),
            rdq_envelope::Timestamp::now(),
        )
        .map_err(st)?;
        self.app
            .throttle(&caller, &msg.queue, msg.flow_key.as_deref(), until)
            .await
            .map_err(st)?;
        let flow = self
            .app
            .flow_status(&caller, &msg.queue)
            .await
            .map_err(st)?;
        Ok(Response::new(crate::messages::flow_response(flow)))
    }
}

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
            .dlq_page(
                &caller,
                &msg.queue,
                dead_filter(msg.error_type, msg.reason),
                cursor,
                limit,
            )
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
            Some(rdq_app::tasks::parse_task_ids(&msg.ids).map_err(st)?)
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
                    reason: msg.reason,
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

    async fn reasons(
        &self,
        request: Request<pb::DlqReasonsRequest>,
    ) -> Result<Response<pb::DlqReasonsResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let reasons = self
            .app
            .dlq_reasons(&caller, &msg.queue)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::DlqReasonsResponse {
            queue: msg.queue,
            reasons: reasons
                .into_iter()
                .map(|r| pb::ReasonCount {
                    reason: r.reason,
                    count: r.count,
                })
                .collect(),
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
            .dlq_export_page(
                &caller,
                &msg.queue,
                dead_filter(msg.error_type.clone(), msg.reason.clone()),
                None,
            )
            .await
            .map_err(st)?;
        let app = self.app.clone();
        let pages = futures::stream::unfold(
            (
                Some(first),
                app,
                caller,
                msg.queue,
                dead_filter(msg.error_type, msg.reason),
            ),
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
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        while let Some(msg) = inbound.next().await {
            let msg = msg?;
            if entries.len() >= MAX_IMPORT_ENTRIES || bytes > MAX_IMPORT_BYTES {
                return Err(st(AppError::new(
                    rdq_app::ErrorKind::TooLarge,
                    "PAYLOAD_TOO_LARGE",
                    format!(
                        "an import stream takes at most {MAX_IMPORT_ENTRIES} entries and {MAX_IMPORT_BYTES} bytes"
                    ),
                )));
            }
            bytes += msg.encoded_len();
            if queue.is_none() {
                // Refused before the rest of the stream is read; the use
                // case checks again.
                caller
                    .require(rdq_app::Scope::Admin, &msg.queue)
                    .map_err(st)?;
                queue = Some(msg.queue);
                dry_run = msg.dry_run;
            }
            entries.push(import_entry(entries.len() + 1, msg.entry));
        }
        let queue = queue.unwrap_or_default();
        let result = self
            .app
            .dlq_import(&caller, &queue, entries, dry_run, |_| {})
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
        let (ids, settles) = settles_of(msg.settles);
        let settled = self.app.settle_many(&caller, settles).await;
        Ok(Response::new(pb::SettleBatchResponse {
            results: settle_results(ids, settled, true),
        }))
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
        // `grpc_router` routes this method to `work::WorkMethod` with
        // `wire::WorkCodec`, which write the same messages without
        // building them; this is the way of whoever mounts the generated
        // server alone.
        let stream = crate::work::open(self.app.clone(), request)
            .await?
            .into_inner();
        Ok(Response::new(Box::pin(
            stream.map(|m| m.map(WorkOut::into_message)),
        )))
    }
}

fn dead_filter(error_type: Option<String>, reason: Option<String>) -> DeadFilter {
    DeadFilter { error_type, reason }
}
