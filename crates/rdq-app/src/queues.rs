//! Queues: every queue with its numbers, and each queue's live policy.
//!
//! The numbers come from what the store has: tasks counted per status
//! (databases), or messages waiting in the broker queues (RabbitMQ), each
//! row saying which ([`StatsSource`]). A store with neither answers
//! `UNSUPPORTED` with a hint.

use rdq_api::queues::{QueueRow, StatsSource};
use rdq_engine::{EngineError, QueueConfig};
use rdq_envelope::validate_queue_name;
use serde_json::Value;

use crate::auth::{Caller, READ_SCOPES, Scope};
use crate::error::AppError;
use crate::{App, AuditRecord};

/// The sections a queue's configuration document may hold beside the
/// policy's fields, each read by one part of rdq and opaque to the engine:
/// `callback` by the server's callback dispatcher (`docs/server.md`),
/// `queuey_compatible` by the RabbitMQ store (`docs/stores/rabbitmq.md`).
pub const CONFIG_SECTIONS: &[&str] = &["callback", QUEUEY_SECTION];

/// The section that makes a queue speak queuey 1.1's wire format on a broker.
const QUEUEY_SECTION: &str = "queuey_compatible";

impl App {
    /// The queues `caller` may see with their numbers; only `names` when
    /// given (`QUEUE_NOT_FOUND` lists the missing ones).
    pub async fn queues(
        &self,
        caller: &Caller,
        names: &[String],
    ) -> Result<Vec<QueueRow>, AppError> {
        for name in names {
            validate_queue_name(name)?;
        }
        let caps = self.engine.capabilities();
        let mut rows = if caps.counts {
            self.engine
                .counts()
                .await?
                .into_iter()
                .map(|c| QueueRow {
                    queue: c.queue,
                    pending: c.pending,
                    in_flight: Some(c.in_flight),
                    succeeded: Some(c.succeeded),
                    dead: c.dead,
                    source: StatsSource::Counts,
                })
                .collect()
        } else if caps.depths {
            let listed = if names.is_empty() {
                self.engine.queue_names().await?
            } else {
                names.to_vec()
            };
            if listed.is_empty() {
                // A broker has no registry of queues: this process knows
                // those it declared or configured, and none yet.
                return Err(AppError::from(EngineError::Unsupported(
                    "this store cannot list its queues, and this process has used none yet".into(),
                ))
                .with_hint("name the queues (GET /v1/queues?names=a,b; rdq queue list QUEUE…) to see their depths"));
            }
            let mut rows = Vec::with_capacity(listed.len());
            for name in &listed {
                if let Some(d) = self.engine.depths(name).await? {
                    rows.push(QueueRow {
                        queue: d.queue,
                        pending: d.ready,
                        in_flight: None,
                        succeeded: None,
                        dead: d.dead,
                        source: StatsSource::Depths,
                    });
                }
            }
            rows
        } else {
            return Err(AppError::from(EngineError::Unsupported(
                "this store can neither count tasks nor report queue depths".into(),
            )));
        };
        rows.retain(|r| caller.allows_queue(&r.queue));
        if names.is_empty() {
            return Ok(rows);
        }
        let mut named = Vec::with_capacity(names.len());
        let mut missing = Vec::new();
        for name in names {
            match rows.iter().position(|r| &r.queue == name) {
                Some(i) => named.push(rows.swap_remove(i)),
                None => missing.push(name.as_str()),
            }
        }
        if missing.is_empty() {
            Ok(named)
        } else {
            Err(AppError::new(
                crate::ErrorKind::NotFound,
                crate::error::QUEUE_NOT_FOUND,
                format!("no queue {}", missing.join(", ")),
            ))
        }
    }

    /// True if `queue` has tasks or a stored policy. On a store that cannot
    /// enumerate its queues (a broker) every valid name exists, with a DLQ
    /// that may be empty.
    pub async fn queue_exists(&self, queue: &str) -> Result<bool, AppError> {
        if !self.engine.capabilities().counts {
            return Ok(true);
        }
        Ok(self.engine.queue_names().await?.iter().any(|q| q == queue))
    }

    /// Refuses unless `caller` has one of `scopes` on `queue`, the name is
    /// valid and the queue exists.
    pub(crate) async fn existing_queue(
        &self,
        caller: &Caller,
        scopes: &[Scope],
        queue: &str,
    ) -> Result<(), AppError> {
        caller.require_any(scopes, queue)?;
        validate_queue_name(queue)?;
        if self.queue_exists(queue).await? {
            Ok(())
        } else {
            Err(AppError::queue_not_found(queue))
        }
    }

    /// The live configuration of `queue`, defaults filled in (any scope on
    /// the queue: reading changes nothing).
    pub async fn queue_config(
        &self,
        caller: &Caller,
        queue: &str,
    ) -> Result<QueueConfig, AppError> {
        self.existing_queue(caller, READ_SCOPES, queue).await?;
        let mut config = self.engine.config(queue).await?;
        // Callback header values and URL secrets are for `admin` eyes only.
        if !caller.has_scope(Scope::Admin)
            && let Some(callback) = config.sections.get_mut("callback")
        {
            let doc = serde_json::json!({ "callback": callback.take() });
            *callback = crate::audit::redact_policy(&doc)["callback"].take();
        }
        Ok(config)
    }

    /// Applies a partial configuration document to `queue` (`admin`): the fields
    /// it names replace the current ones (nested objects whole); the result
    /// is validated (and by the front end's [`crate::PolicyCheck`]), stored,
    /// audited, and applies at once.
    pub async fn set_queue_config(
        &self,
        caller: &Caller,
        queue: &str,
        patch: &Value,
    ) -> Result<QueueConfig, AppError> {
        caller.require(Scope::Admin, queue)?;
        validate_queue_name(queue)?;
        let current = self.engine.config(queue).await?;
        let next = current.patched(patch, CONFIG_SECTIONS)?;
        if let Some(flag) = next.section(QUEUEY_SECTION)
            && !flag.is_boolean()
        {
            return Err(
                EngineError::InvalidPolicy(format!("{QUEUEY_SECTION}: must be a boolean")).into(),
            );
        }
        if let Some(check) = &self.shared.policy_check {
            check(next.clone())
                .await
                .map_err(EngineError::InvalidPolicy)?;
        }
        self.engine.set_config(queue, &next).await?;
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "queue.config",
            queue: Some(queue.to_owned()),
            count: None,
            dry_run: false,
            detail: serde_json::json!({ "patch": crate::audit::redact_policy(patch) }),
        });
        if let Some(changed) = &self.shared.config_changed {
            changed(queue);
        }
        Ok(next)
    }

    /// True when queue configuration lives in this process only (a broker):
    /// front ends say so beside every policy they show.
    pub fn config_is_local(&self) -> bool {
        self.engine.capabilities().config_local
    }
}
