//! Sources (`rdq_source`): the Kafka topics, NATS JetStream streams and SQS
//! queues this process reads, each record one task, with their status; and
//! a source's cursors in the store, which an operator resets.
//!
//! A source belongs to the queue its tasks go to: reading its status needs
//! any scope on that queue, and a caller who may not read the queue gets
//! `SOURCE_NOT_FOUND`, as for a name this process does not run; a list
//! leaves such sources out. Resetting a source's cursors needs `admin` on
//! its queue (for a source this process does not run, whose queue it
//! cannot tell, `admin` on every queue) and is audited (`source.reset`).

use rdq_api::sources::{SourceKind, SourcePartition, SourceState, SourceStatus};
use rdq_engine::EngineError;
use serde_json::json;

use crate::auth::{Caller, READ_SCOPES, Scope};
use crate::error::{AppError, ErrorKind, FORBIDDEN, SOURCE_NOT_FOUND};
use crate::{App, AuditRecord};

/// A source's status as the API shows it.
pub fn source_status(s: rdq_source::SourceStatus) -> SourceStatus {
    SourceStatus {
        name: s.name,
        kind: match s.kind {
            rdq_source::Kind::Kafka => SourceKind::Kafka,
            rdq_source::Kind::Nats => SourceKind::Nats,
            rdq_source::Kind::Sqs => SourceKind::Sqs,
        },
        queue: s.queue,
        state: match s.state {
            rdq_source::SourceState::Starting => SourceState::Starting,
            rdq_source::SourceState::Running => SourceState::Running,
            rdq_source::SourceState::Paused => SourceState::Paused,
            rdq_source::SourceState::Retrying => SourceState::Retrying,
            rdq_source::SourceState::Stopped => SourceState::Stopped,
        },
        paused: s.paused,
        lag: s.lag,
        ingested: s.ingested,
        dead: s.dead,
        duplicates: s.duplicates,
        rate: s.rate,
        last_error: s.last_error,
        last_error_at_ms: s.last_error_at_ms,
        cursors_in_store: s.cursors_in_store,
        partitions: s
            .partitions
            .into_iter()
            .map(|p| SourcePartition {
                partition: p.partition,
                cursor: p.cursor,
                lag: p.lag,
            })
            .collect(),
    }
}

/// `INVALID_ARGUMENT` (field `source`) unless `name` is a source's name,
/// `[a-z0-9._-]{1,120}`, before anything is looked up.
pub fn check_source_name(name: &str) -> Result<(), AppError> {
    rdq_engine::store::sources::validate_cursor_names(name, "-").map_err(AppError::from)
}

fn source_not_found(name: &str) -> AppError {
    AppError::new(
        ErrorKind::NotFound,
        SOURCE_NOT_FOUND,
        format!("no source {name:?} runs in this server"),
    )
}

impl App {
    /// The status registry of the sources this process runs.
    pub fn source_registry(&self) -> &rdq_source::Registry {
        &self.shared.sources
    }

    /// Every source on a queue the caller may read, by name.
    pub fn sources(&self, caller: &Caller) -> Vec<SourceStatus> {
        self.shared
            .sources
            .all()
            .into_iter()
            .filter(|s| caller.require_any(READ_SCOPES, &s.queue).is_ok())
            .map(source_status)
            .collect()
    }

    /// The source `name` (any scope on its queue); `SOURCE_NOT_FOUND` when
    /// this process runs none of that name or the caller may not read its
    /// queue.
    pub fn source(&self, caller: &Caller, name: &str) -> Result<SourceStatus, AppError> {
        check_source_name(name)?;
        let status = self
            .shared
            .sources
            .get(name)
            .ok_or_else(|| source_not_found(name))?;
        if caller.require_any(READ_SCOPES, &status.queue).is_err() {
            return Err(source_not_found(name));
        }
        Ok(source_status(status))
    }

    /// Removes every cursor the store keeps for the source `name` (module
    /// documentation for who may); audited. Answers how many there were.
    /// The source then resumes from its own position (Kafka's committed
    /// offset, the JetStream consumer's acknowledgements). `UNSUPPORTED` on
    /// a store without capability `source_cursors`.
    pub async fn reset_source_cursors(&self, caller: &Caller, name: &str) -> Result<u64, AppError> {
        check_source_name(name)?;
        let queue = match self.shared.sources.get(name) {
            Some(status) => {
                if caller.require_any(READ_SCOPES, &status.queue).is_err() {
                    return Err(source_not_found(name));
                }
                caller.require(Scope::Admin, &status.queue)?;
                Some(status.queue)
            }
            None => {
                caller.require_scope(Scope::Admin)?;
                if !caller.allows_every_queue() {
                    return Err(AppError::new(
                        ErrorKind::Forbidden,
                        FORBIDDEN,
                        format!(
                            "no source {name:?} runs in this server, so its queue is unknown: resetting it needs an admin token for every queue"
                        ),
                    ));
                }
                None
            }
        };
        let deleted = self
            .engine
            .delete_source_cursors(name)
            .await
            .map_err(|e| {
                let unsupported = matches!(e, EngineError::Unsupported(_));
                let e = AppError::from(e);
                if unsupported {
                    e.with_hint("this store keeps no source cursors (capability source_cursors is off): a source's position is the source's own (Kafka's committed offset, the JetStream consumer's acknowledgements, the SQS delete)")
                } else {
                    e
                }
            })?;
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "source.reset",
            queue,
            count: Some(deleted),
            dry_run: false,
            detail: json!({"name": name}),
        });
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rdq_engine::{Engine, SystemClock};

    use super::*;
    use crate::auth::{Authenticator, TokenConfig};
    use crate::{AppParts, ErrorKind};

    async fn app_with(tokens: &[TokenConfig]) -> App {
        let engine = Engine::new(
            Arc::new(rdq_store_memory::MemoryStore::new()),
            Arc::new(SystemClock),
        );
        let sources = rdq_source::Registry::default();
        sources.add("orders", rdq_source::Kind::Kafka, "orders");
        sources.add("audit.events", rdq_source::Kind::Nats, "audit");
        sources.error(
            "orders",
            "source orders: broker 127.0.0.1:1 unreachable",
            1_700_000_000_000,
        );
        App::new(AppParts {
            auth: Authenticator::new(tokens).unwrap(),
            sources,
            ..AppParts::local(engine)
        })
        .await
        .unwrap()
    }

    fn token(name: &str, scopes: &str, queues: &[&str]) -> TokenConfig {
        serde_json::from_value(json!({
            "name": name,
            "token": format!("{name}-token-0123456789"),
            "scopes": [scopes],
            "queues": queues,
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_caller_sees_the_sources_of_the_queues_it_may_read() {
        let app = app_with(&[
            token("ops", "admin", &[]),
            token("orders", "submit", &["orders"]),
        ])
        .await;
        let ops = app
            .authenticate(Some(b"Bearer ops-token-0123456789"))
            .unwrap();
        let names: Vec<_> = app.sources(&ops).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["audit.events", "orders"]);
        let orders = app
            .authenticate(Some(b"Bearer orders-token-0123456789"))
            .unwrap();
        let listed = app.sources(&orders);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].state, SourceState::Retrying);
        assert_eq!(listed[0].kind, SourceKind::Kafka);
        assert!(
            listed[0]
                .last_error
                .as_deref()
                .unwrap()
                .contains("unreachable")
        );
        let hidden = app.source(&orders, "audit.events").unwrap_err();
        assert_eq!(hidden.code(), SOURCE_NOT_FOUND);
        assert_eq!(hidden.kind(), ErrorKind::NotFound);
        let missing = app.source(&ops, "nope").unwrap_err();
        assert_eq!(missing.code(), SOURCE_NOT_FOUND);
        let bad = app.source(&ops, "Bad Name").unwrap_err();
        assert_eq!(bad.code(), "INVALID_ARGUMENT");
        assert_eq!(bad.kind(), ErrorKind::Invalid);
    }

    #[tokio::test]
    async fn a_reset_needs_admin_on_the_queue_and_is_audited() {
        let app = app_with(&[
            token("ops", "admin", &[]),
            token("orders-admin", "admin", &["orders"]),
            token("worker", "work", &[]),
        ])
        .await;
        let worker = app
            .authenticate(Some(b"Bearer worker-token-0123456789"))
            .unwrap();
        let refused = app
            .reset_source_cursors(&worker, "orders")
            .await
            .unwrap_err();
        assert_eq!(refused.code(), FORBIDDEN);
        let scoped = app
            .authenticate(Some(b"Bearer orders-admin-token-0123456789"))
            .unwrap();
        let unknown = app
            .reset_source_cursors(&scoped, "elsewhere")
            .await
            .unwrap_err();
        assert_eq!(unknown.code(), FORBIDDEN);
        let ops = app
            .authenticate(Some(b"Bearer ops-token-0123456789"))
            .unwrap();
        assert_eq!(app.reset_source_cursors(&ops, "orders").await.unwrap(), 0);
        assert_eq!(
            app.reset_source_cursors(&ops, "elsewhere").await.unwrap(),
            0
        );
        let records = app.audit().recent(10, |r| r.action == "source.reset");
        assert_eq!(records.len(), 2);
        assert!(records.iter().any(|r| r["queue"] == "orders"
            && r["who"] == "ops"
            && r["count"] == 0
            && r["detail"]["name"] == "orders"));
    }
}
