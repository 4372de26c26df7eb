//! An `OutcomeMapper` for a function that signals failure in its return
//! value, not by an error: a payment gateway client answering a status.
//!
//! Without a mapper every `Ok` is a success, so a `Declined` status would
//! vanish as SUCCEEDED. The mapper, registered for the queue, is the top rung
//! of the outcome ladder: it turns `Declined` into a permanent failure with a
//! meaningful DLQ entry (type, message, structured detail), `Throttled` into
//! a retryable one, and an `AlreadyCaptured` error into SUCCESS, because a
//! replayed capture that already went through is done.
//!
//! ```sh
//! cargo run -p rdq --example status_mapper
//! ```

use std::time::Duration;

use rdq::prelude::*;
use rdq::testing::TestBackend;
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "shop")]
enum AppQueues {
    Payments,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Payments)]
struct Capture {
    order: u64,
    cents: u64,
}

/// What the gateway answers.
#[derive(Debug, Clone, PartialEq)]
enum GatewayStatus {
    Captured,
    Throttled,
    Declined { code: String },
}

/// The gateway's one error: this capture happened before.
#[derive(Debug, thiserror::Error)]
#[error("order {0} was already captured")]
struct AlreadyCaptured(u64);

async fn capture(job: Capture, _ctx: JobContext) -> Result<GatewayStatus, JobError> {
    match job.order {
        1 => Ok(GatewayStatus::Captured),
        2 => Ok(GatewayStatus::Declined {
            code: "insufficient_funds".into(),
        }),
        3 => Err(AlreadyCaptured(job.order).into()),
        _ if job.cents > 100_000 => Ok(GatewayStatus::Throttled),
        _ => Ok(GatewayStatus::Captured),
    }
}

fn gateway_outcome(returned: Returned<'_>, ctx: &JobContext) -> Outcome {
    if let Some(error) = returned.error() {
        if error.find::<AlreadyCaptured>().is_some() {
            return Outcome::Success; // an idempotent replay
        }
        return Outcome::retryable_error(error);
    }
    match returned.value::<GatewayStatus>() {
        Some(GatewayStatus::Captured) => Outcome::Success,
        Some(GatewayStatus::Throttled) => {
            Outcome::retryable("gateway.Throttled", "the gateway asked us to slow down")
        }
        Some(GatewayStatus::Declined { code }) => {
            Outcome::permanent("gateway.Declined", &format!("declined: {code}"))
                .with_detail(json!({ "status": "DECLINED", "code": code, "attempt": ctx.attempt }))
        }
        None => Outcome::Unmapped,
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), rdq::Error> {
    // Virtual time: the demo's retries and backoff take no wall-clock time.
    let backend = TestBackend::new();
    let producer = backend.producer::<AppQueues>();
    for (order, cents) in [(1, 1_000), (2, 5_000), (3, 2_000), (4, 500_000)] {
        producer.enqueue(&Capture { order, cents }).await?;
    }

    let worker = backend
        .worker::<AppQueues>()
        .handler_fn(capture)
        .outcome_mapper(AppQueues::Payments, gateway_outcome)
        .retry_override(
            AppQueues::Payments,
            RetryPolicy::fixed(3, Duration::from_secs(30)),
        )
        .build()?
        .start();
    backend
        .wait_until_settled("shop.payments", Duration::from_secs(600))
        .await;
    worker.shutdown(Duration::from_secs(1)).await?;

    for task in backend.succeeded("shop.payments").await {
        println!(
            "succeeded: {} after {} attempt(s)",
            task.id, task.attempt_count
        );
    }
    for dead in backend.dead_letters("shop.payments").await {
        println!(
            "dead ({:?}): {} {} {}",
            dead.cause,
            dead.error_type(),
            dead.message(),
            dead.error
                .as_ref()
                .and_then(|e| e.detail.as_ref())
                .map(ToString::to_string)
                .unwrap_or_default()
        );
    }
    Ok(())
}
