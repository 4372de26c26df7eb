//! Where the operator commands (`submit`, `task`, `queue`, `dlq`,
//! `schedule`, `source status`, `source reset`) go: a
//! running server over HTTP (`--server URL`, token from `RDQ_TOKEN`), or a
//! store opened directly (`--store`). One trait, [`Operations`], with two
//! implementations: [`Local`] over the application layer (`rdq_app`, the
//! very use cases the server's handlers call) and [`Remote`] over the typed
//! HTTP client (`rdq_client`). Both give the same results.
//!
//! Which one: `--server`, else `--store`, else `RDQ_SERVER`, else
//! `RDQ_STORE`, else the server at `http://127.0.0.1:7480`. Operations
//! through a server are audited there; operations straight on a store are
//! not (there is no server to record them).

use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use clap::Args;
use rdq_api::dlq::{LineError, PageQuery, ReasonCount, RedriveBody};
use rdq_api::flow::{QueueFlow, ThrottleBody};
use rdq_api::queues::QueueRow;
use rdq_api::tasks::{CancelBody, CancelResult, SubmitBody, TaskPageQuery};
pub use rdq_app::dlq::DeadFilter;
use rdq_app::dlq::RedriveFilter;
use rdq_app::{App, AppError, AppParts, Caller};
use rdq_client::{Client, ClientError};
use rdq_engine::{Engine, Submitted, SystemClock};
use rdq_envelope::{Envelope, TaskId, Timestamp};
use rdq_server::callback::{CallbackSettings, CallbackTarget};
use serde_json::Value;

use crate::CliError;
use crate::stores::open_store;

mod schedules;
mod sources;
pub use schedules::ScheduleOperations;
pub use sources::SourceOperations;

/// Where the default server listens.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7480";

/// `--server`, `--store` and `--json`, accepted by every operator command.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// A running rdq-server (token from RDQ_TOKEN) [env: RDQ_SERVER]
    /// [default: http://127.0.0.1:7480].
    #[arg(long, global = true, value_name = "URL", conflicts_with = "store")]
    pub server: Option<String>,
    /// Work on a store directly: a directory (embedded store) or a store URL [env: RDQ_STORE].
    #[arg(long, global = true, value_name = "STORE")]
    pub store: Option<String>,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Why an import was refused.
#[derive(Debug)]
pub enum ImportRefusal {
    /// Bad lines (the first ones, and how many in all); nothing was imported.
    Lines(Vec<LineError>, usize),
    /// Another failure.
    Other(CliError),
}

impl From<CliError> for ImportRefusal {
    fn from(e: CliError) -> Self {
        Self::Other(e)
    }
}

/// An operator command's way to rdq: what every command can ask of a
/// server or of a store.
#[async_trait(?Send)]
pub trait Operations: ScheduleOperations + SourceOperations {
    /// Submits a task; `true` when it was created (not an idempotent repeat).
    async fn submit(&self, body: Value) -> Result<(bool, Envelope), CliError>;
    /// The task with this id.
    async fn task(&self, id: &str) -> Result<Envelope, CliError>;
    /// Cancels PENDING tasks of `queue` by id or filter.
    async fn cancel(&self, queue: &str, body: CancelBody) -> Result<CancelResult, CliError>;
    /// One page of `queue`'s tasks, newest first, and the next cursor.
    async fn tasks(
        &self,
        queue: &str,
        query: TaskPageQuery,
    ) -> Result<(Vec<Envelope>, Option<String>), CliError>;
    /// The dead task `id` of `queue`, on any store that can list its DLQ.
    async fn dead_task(&self, queue: &str, id: &str) -> Result<Envelope, CliError>;
    /// Every queue with its numbers, or only the named ones.
    async fn queues(&self, names: &[String]) -> Result<Vec<QueueRow>, CliError>;
    /// The live policy of `queue` (`None` for a queue that does not exist).
    async fn config(&self, queue: &str) -> Result<Option<Value>, CliError>;
    /// Applies a partial policy document; returns the new policy.
    async fn set_config(&self, queue: &str, patch: Value) -> Result<Value, CliError>;
    /// `queue`'s flow limits and how they stand now.
    async fn flow(&self, queue: &str) -> Result<QueueFlow, CliError>;
    /// Throttles `key` (the whole queue with `None`) for `for_ms` or until
    /// `until` (RFC 3339); the flow status after it.
    async fn throttle(
        &self,
        queue: &str,
        key: Option<String>,
        for_ms: Option<u64>,
        until: Option<String>,
    ) -> Result<QueueFlow, CliError>;
    /// One page of `queue`'s DLQ, newest first, and the next cursor.
    async fn dead_page(
        &self,
        queue: &str,
        filter: &DeadFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Envelope>, Option<String>), CliError>;
    /// `queue`'s dead tasks counted by reason, most first.
    async fn dead_reasons(&self, queue: &str) -> Result<Vec<ReasonCount>, CliError>;
    /// Redrives (or, on a dry run, lists) matching dead tasks; their ids.
    async fn redrive(
        &self,
        queue: &str,
        ids: Option<Vec<String>>,
        filter: DeadFilter,
        limit: Option<usize>,
        dry_run: bool,
    ) -> Result<Vec<String>, CliError>;
    /// Writes `queue`'s DLQ as JSONL to `out`, calling `progress` with the
    /// number of envelopes written so far; returns the total.
    async fn export(
        &self,
        queue: &str,
        filter: &DeadFilter,
        out: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<u64, CliError>;
    /// Imports JSONL into `queue`'s DLQ (all or nothing); how many were
    /// imported (or would be, on a dry run).
    async fn import(
        &self,
        queue: &str,
        jsonl: Vec<u8>,
        dry_run: bool,
        progress: &dyn Fn(u64),
    ) -> Result<u64, ImportRefusal>;
    /// Removes (or counts, on a dry run) every dead task of `queue`.
    async fn purge(&self, queue: &str, dry_run: bool) -> Result<u64, CliError>;
}

/// The backend `args` name (see the module documentation).
pub struct Backend;

impl Backend {
    /// Picks and opens the backend `args` name.
    pub async fn open(args: &TargetArgs) -> Result<Box<dyn Operations>, CliError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(url) = &args.server {
            return Remote::connect(url);
        }
        if let Some(spec) = &args.store {
            return Local::open(spec).await;
        }
        if let Some(url) = env("RDQ_SERVER") {
            return Remote::connect(&url);
        }
        if let Some(spec) = env("RDQ_STORE") {
            return Local::open(&spec).await;
        }
        Remote::connect(DEFAULT_SERVER)
    }
}

impl From<AppError> for CliError {
    fn from(e: AppError) -> Self {
        let mut message = e.detail().to_owned();
        if let Some(hint) = e.extensions().get("hint").and_then(Value::as_str) {
            message.push_str("; ");
            message.push_str(hint);
        }
        CliError::new(e.code(), message)
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        let mut message = e.detail.clone();
        if e.code == "SERVER_UNREACHABLE" {
            message.push_str(" (is `rdq serve` running? --server / RDQ_SERVER)");
        }
        if let Some(hint) = e
            .problem
            .as_ref()
            .and_then(|p| p.extensions.get("hint"))
            .and_then(Value::as_str)
        {
            message.push_str("; ");
            message.push_str(hint);
        }
        CliError::new(e.code, message)
    }
}

fn parse_id(id: &str) -> Result<TaskId, CliError> {
    TaskId::parse(id).ok_or_else(|| {
        CliError::new(
            "INVALID_ARGUMENT",
            format!("{id:?} is not a task id (a 26-character ULID)"),
        )
    })
}

fn submit_body(body: Value) -> Result<SubmitBody, CliError> {
    serde_json::from_value(body).map_err(|e| CliError::new("MALFORMED_REQUEST", e.to_string()))
}

fn io(e: std::io::Error) -> CliError {
    CliError::new("IO_ERROR", format!("cannot write the export: {e}"))
}

/// A store opened directly, through the application layer, as an operator
/// with every right (whoever can open the store can do anything to it).
pub struct Local {
    app: App,
    caller: Caller,
}

impl Local {
    /// Opens the store `spec` names (see [`crate::stores`]).
    pub async fn open(spec: &str) -> Result<Box<dyn Operations>, CliError> {
        let engine = Engine::new(open_store(spec).await?, Arc::new(SystemClock));
        // The target's shape is checked here; whether its URL is allowed is
        // the server's to say (its allowlist), when it loads the policy.
        let any_url = CallbackSettings {
            allow: vec!["*".to_owned()],
            allow_private: true,
            ..CallbackSettings::default()
        };
        let mut parts = AppParts::local(engine);
        parts.policy_check = Some(Arc::new(move |config| {
            let checked = CallbackTarget::from_config(&config, &any_url).map(drop);
            Box::pin(async move { checked })
        }));
        let app = App::new(parts).await.map_err(AppError::from)?;
        Ok(Box::new(Self {
            app,
            caller: Caller::open(),
        }))
    }
}

#[async_trait(?Send)]
impl Operations for Local {
    async fn submit(&self, body: Value) -> Result<(bool, Envelope), CliError> {
        let command = rdq_server::api::tasks::submit_command(submit_body(body)?)?;
        match self.app.submit(&self.caller, command).await? {
            Submitted::Created(e) => Ok((true, e)),
            Submitted::Existing(e) => Ok((false, e)),
        }
    }

    async fn task(&self, id: &str) -> Result<Envelope, CliError> {
        Ok(self.app.task(&self.caller, parse_id(id)?).await?)
    }

    async fn cancel(&self, queue: &str, body: CancelBody) -> Result<CancelResult, CliError> {
        Ok(self.app.cancel_tasks(&self.caller, queue, body).await?)
    }

    async fn tasks(
        &self,
        queue: &str,
        query: TaskPageQuery,
    ) -> Result<(Vec<Envelope>, Option<String>), CliError> {
        let status = query
            .status
            .as_deref()
            .map(|s| {
                rdq_envelope::Status::parse(s).ok_or_else(|| {
                    CliError::new(
                        "INVALID_ARGUMENT",
                        format!("--status {s:?}: expected PENDING, IN_FLIGHT, SUCCEEDED or DEAD"),
                    )
                })
            })
            .transpose()?;
        let headers = match query.header.as_deref() {
            None => Default::default(),
            Some(pair) => crate::envelope_cmd::parse_headers(&[pair.to_owned()])?,
        };
        let filter = rdq_app::tasks::TaskFilter {
            status,
            handler_ref: query.handler_ref,
            headers,
        };
        let page = self
            .app
            .tasks_page(
                &self.caller,
                queue,
                filter,
                query.cursor.as_deref().map(parse_id).transpose()?,
                query.limit.unwrap_or(rdq_api::DEFAULT_PAGE),
            )
            .await?;
        Ok((page.items, page.next_cursor.map(|c| c.to_string())))
    }

    async fn dead_task(&self, queue: &str, id: &str) -> Result<Envelope, CliError> {
        Ok(self
            .app
            .dlq_task(&self.caller, queue, parse_id(id)?)
            .await?)
    }

    async fn queues(&self, names: &[String]) -> Result<Vec<QueueRow>, CliError> {
        Ok(self.app.queues(&self.caller, names).await?)
    }

    async fn config(&self, queue: &str) -> Result<Option<Value>, CliError> {
        match self.app.queue_config(&self.caller, queue).await {
            Ok(policy) => serde_json::to_value(policy)
                .map(Some)
                .map_err(|e| CliError::new("INTERNAL", e.to_string())),
            Err(e) if e.code() == rdq_app::error::QUEUE_NOT_FOUND => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn set_config(&self, queue: &str, patch: Value) -> Result<Value, CliError> {
        // Whether a callback URL is allowed is the server's to say (its
        // allowlist), when it loads the policy.
        let next = self
            .app
            .set_queue_config(&self.caller, queue, &patch)
            .await?;
        serde_json::to_value(next).map_err(|e| CliError::new("INTERNAL", e.to_string()))
    }

    async fn flow(&self, queue: &str) -> Result<QueueFlow, CliError> {
        Ok(self.app.flow_status(&self.caller, queue).await?)
    }

    async fn throttle(
        &self,
        queue: &str,
        key: Option<String>,
        for_ms: Option<u64>,
        until: Option<String>,
    ) -> Result<QueueFlow, CliError> {
        let until = rdq_app::flow::throttle_until(for_ms, until.as_deref(), Timestamp::now())?;
        self.app
            .throttle(&self.caller, queue, key.as_deref(), until)
            .await?;
        Ok(self.app.flow_status(&self.caller, queue).await?)
    }

    async fn dead_page(
        &self,
        queue: &str,
        filter: &DeadFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Envelope>, Option<String>), CliError> {
        let page = self
            .app
            .dlq_page(
                &self.caller,
                queue,
                filter.clone(),
                cursor.map(parse_id).transpose()?,
                limit,
            )
            .await?;
        Ok((page.items, page.next_cursor.map(|c| c.to_string())))
    }

    async fn dead_reasons(&self, queue: &str) -> Result<Vec<ReasonCount>, CliError> {
        let counts = self.app.dlq_reasons(&self.caller, queue).await?;
        Ok(counts
            .into_iter()
            .map(|c| ReasonCount {
                reason: c.reason,
                count: c.count,
            })
            .collect())
    }

    async fn redrive(
        &self,
        queue: &str,
        ids: Option<Vec<String>>,
        filter: DeadFilter,
        limit: Option<usize>,
        dry_run: bool,
    ) -> Result<Vec<String>, CliError> {
        let filter = RedriveFilter {
            ids: ids
                .map(|ids| {
                    ids.iter()
                        .map(|i| parse_id(i))
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()?,
            error_type: filter.error_type,
            reason: filter.reason,
            limit,
            dry_run,
        };
        Ok(self.app.dlq_redrive(&self.caller, queue, filter).await?.ids)
    }

    async fn export(
        &self,
        queue: &str,
        filter: &DeadFilter,
        out: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<u64, CliError> {
        let mut written = 0u64;
        let mut cursor: Option<TaskId> = None;
        loop {
            let page = self
                .app
                .dlq_export_page(&self.caller, queue, filter.clone(), cursor)
                .await?;
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
        out.flush().map_err(io)?;
        Ok(written)
    }

    async fn import(
        &self,
        queue: &str,
        jsonl: Vec<u8>,
        dry_run: bool,
        progress: &dyn Fn(u64),
    ) -> Result<u64, ImportRefusal> {
        match self
            .app
            .dlq_import(
                &self.caller,
                queue,
                rdq_server::api::dead::import_entries(&jsonl),
                dry_run,
                progress,
            )
            .await
        {
            Ok(r) => {
                if dry_run {
                    progress(r.checked);
                    Ok(r.checked)
                } else {
                    Ok(r.imported)
                }
            }
            Err(e) => Err(refusal_of(&e).unwrap_or_else(|| ImportRefusal::Other(e.into()))),
        }
    }

    async fn purge(&self, queue: &str, dry_run: bool) -> Result<u64, CliError> {
        Ok(self
            .app
            .dlq_purge(&self.caller, queue, dry_run)
            .await?
            .purged)
    }
}

/// The bad lines of an `INVALID_IMPORT` refusal.
fn refusal_of(e: &AppError) -> Option<ImportRefusal> {
    if e.code() != rdq_app::error::INVALID_IMPORT {
        return None;
    }
    let errors: Vec<LineError> =
        serde_json::from_value(e.extensions().get("errors")?.clone()).ok()?;
    let total = e
        .extensions()
        .get("error_count")
        .and_then(Value::as_u64)
        .map_or(errors.len(), |n| usize::try_from(n).unwrap_or(usize::MAX));
    Some(ImportRefusal::Lines(errors, total))
}

/// A running server, through the typed HTTP client.
pub struct Remote {
    client: Client,
}

impl Remote {
    /// A client of the server at `base`, with the token in `RDQ_TOKEN`;
    /// `RDQ_CA_FILE` names a PEM file of the private CA that issued an
    /// `https://` server's certificate (`docs/deployment.md`).
    pub fn connect(base: &str) -> Result<Box<dyn Operations>, CliError> {
        let token = std::env::var("RDQ_TOKEN").ok().filter(|t| !t.is_empty());
        let ca_file = std::env::var_os("RDQ_CA_FILE").filter(|f| !f.is_empty());
        let prefix = |mut e: rdq_client::ClientError| {
            e.detail = format!("--server {}", e.detail);
            CliError::from(e)
        };
        let client = match ca_file {
            None => Client::new(base, token).map_err(prefix)?,
            Some(path) => {
                let pem = std::fs::read(&path).map_err(|e| {
                    CliError::new(
                        "IO_ERROR",
                        format!("cannot read RDQ_CA_FILE {}: {e}", path.to_string_lossy()),
                    )
                })?;
                with_ca(base, token, &pem, prefix)?
            }
        };
        Ok(Box::new(Self { client }))
    }
}

/// A client trusting only the CA certificates in `pem`.
#[cfg(feature = "https")]
fn with_ca(
    base: &str,
    token: Option<String>,
    pem: &[u8],
    prefix: impl Fn(rdq_client::ClientError) -> CliError,
) -> Result<Client, CliError> {
    Client::with_ca_pem(base, token, pem).map_err(prefix)
}

/// Without TLS support there is no CA to trust.
#[cfg(not(feature = "https"))]
fn with_ca(
    _: &str,
    _: Option<String>,
    _: &[u8],
    _: impl Fn(rdq_client::ClientError) -> CliError,
) -> Result<Client, CliError> {
    Err(CliError::new(
        "UNSUPPORTED",
        "this rdq was built without the `https` feature, so RDQ_CA_FILE cannot be used",
    ))
}

#[async_trait(?Send)]
impl Operations for Remote {
    async fn submit(&self, body: Value) -> Result<(bool, Envelope), CliError> {
        Ok(self.client.submit(&submit_body(body)?).await?)
    }

    async fn task(&self, id: &str) -> Result<Envelope, CliError> {
        Ok(self.client.task(parse_id(id)?).await?)
    }

    async fn cancel(&self, queue: &str, body: CancelBody) -> Result<CancelResult, CliError> {
        Ok(self.client.cancel_tasks(queue, &body).await?)
    }

    async fn tasks(
        &self,
        queue: &str,
        query: TaskPageQuery,
    ) -> Result<(Vec<Envelope>, Option<String>), CliError> {
        Ok(self.client.tasks_page(queue, &query).await?)
    }

    async fn dead_task(&self, queue: &str, id: &str) -> Result<Envelope, CliError> {
        Ok(self.client.dlq_task(queue, parse_id(id)?).await?)
    }

    async fn queues(&self, names: &[String]) -> Result<Vec<QueueRow>, CliError> {
        for name in names {
            rdq_envelope::validate_queue_name(name)?;
        }
        Ok(self.client.queues(names).await?)
    }

    async fn config(&self, queue: &str) -> Result<Option<Value>, CliError> {
        match self.client.queue_config(queue).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code == rdq_app::error::QUEUE_NOT_FOUND => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn set_config(&self, queue: &str, patch: Value) -> Result<Value, CliError> {
        Ok(self.client.set_queue_config(queue, &patch).await?)
    }

    async fn flow(&self, queue: &str) -> Result<QueueFlow, CliError> {
        Ok(self.client.queue_flow(queue).await?)
    }

    async fn throttle(
        &self,
        queue: &str,
        key: Option<String>,
        for_ms: Option<u64>,
        until: Option<String>,
    ) -> Result<QueueFlow, CliError> {
        let body = ThrottleBody {
            flow_key: key,
            for_ms: for_ms.map(Value::from),
            until,
        };
        Ok(self.client.throttle(queue, &body).await?)
    }

    async fn dead_page(
        &self,
        queue: &str,
        filter: &DeadFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Envelope>, Option<String>), CliError> {
        let page = PageQuery {
            limit: Some(limit),
            cursor: cursor.map(parse_id).transpose()?.map(|c| c.to_string()),
            error_type: filter.error_type.clone(),
            reason: filter.reason.clone(),
        };
        Ok(self.client.dlq_page(queue, &page).await?)
    }

    async fn dead_reasons(&self, queue: &str) -> Result<Vec<ReasonCount>, CliError> {
        Ok(self.client.dlq_reasons(queue).await?.reasons)
    }

    async fn redrive(
        &self,
        queue: &str,
        ids: Option<Vec<String>>,
        filter: DeadFilter,
        limit: Option<usize>,
        dry_run: bool,
    ) -> Result<Vec<String>, CliError> {
        let body = RedriveBody {
            ids,
            error_type: filter.error_type,
            reason: filter.reason,
            limit,
            dry_run,
        };
        Ok(self.client.dlq_redrive(queue, &body).await?.ids)
    }

    async fn export(
        &self,
        queue: &str,
        filter: &DeadFilter,
        out: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<u64, CliError> {
        let mut written = 0u64;
        let total = self
            .client
            .dlq_export(
                queue,
                filter.error_type.as_deref(),
                filter.reason.as_deref(),
                |chunk| {
                    out.write_all(chunk)?;
                    written += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
                    progress(written);
                    Ok(())
                },
            )
            .await?;
        out.flush().map_err(io)?;
        Ok(total)
    }

    async fn import(
        &self,
        queue: &str,
        jsonl: Vec<u8>,
        dry_run: bool,
        progress: &dyn Fn(u64),
    ) -> Result<u64, ImportRefusal> {
        match self.client.dlq_import(queue, jsonl, dry_run).await {
            Ok(r) => {
                progress(r.checked);
                Ok(r.checked)
            }
            Err(e) => match e.import_errors() {
                Some((lines, total)) => Err(ImportRefusal::Lines(lines, total)),
                None => Err(ImportRefusal::Other(e.into())),
            },
        }
    }

    async fn purge(&self, queue: &str, dry_run: bool) -> Result<u64, CliError> {
        Ok(self.client.dlq_purge(queue, dry_run).await?.purged)
    }
}
