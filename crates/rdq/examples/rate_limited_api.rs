//! A rate-limited API handler: `429 Too Many Requests` with `Retry-After` is
//! not a failure, so the job is deferred for exactly that long. It spends no
//! attempt and comes back at the queue's top priority, ahead of the backlog
//! that piled up meanwhile. A cap on deferrals turns an endless rate limit
//! into a permanent failure.
//!
//! ```sh
//! cargo run -p rdq --example rate_limited_api
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rdq::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "demo")]
enum AppQueues {
    Api,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Api)]
struct SyncContact {
    contact_id: u64,
}

/// What the (simulated) API answers.
enum Response {
    Ok,
    TooManyRequests { retry_after: Duration },
}

/// An API that allows one call per window and tells the rest when to come back.
struct RateLimitedApi {
    calls: AtomicU32,
}

impl RateLimitedApi {
    async fn sync(&self, _contact_id: u64) -> Response {
        if self.calls.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            Response::Ok
        } else {
            Response::TooManyRequests {
                retry_after: Duration::from_millis(200),
            }
        }
    }
}

struct SyncHandler {
    api: Arc<RateLimitedApi>,
}

/// Past this many deferrals the job gives up: a limit that never lifts is a fault.
const MAX_DEFERRALS: u32 = 5;

impl JobHandler for SyncHandler {
    type Job = SyncContact;
    type Output = ();
    type Error = JobError;

    async fn handle(&self, job: SyncContact, ctx: JobContext) -> Result<(), JobError> {
        match self.api.sync(job.contact_id).await {
            Response::Ok => {
                println!(
                    "contact {} synced (attempt {}, after {} deferrals, priority {})",
                    job.contact_id, ctx.attempt, ctx.deferrals, ctx.priority
                );
                Ok(())
            }
            Response::TooManyRequests { .. } if ctx.deferrals >= MAX_DEFERRALS => {
                Err(rdq::permanent(JobError::new(
                    "api.RateLimited",
                    format!("still rate limited after {MAX_DEFERRALS} deferrals"),
                )))
            }
            Response::TooManyRequests { retry_after } => {
                println!("contact {}: 429, back in {retry_after:?}", job.contact_id);
                Err(rdq::defer(retry_after))
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), rdq::Error> {
    let engine = rdq::open_memory();
    let producer = Producer::<AppQueues>::new(engine.clone());
    let contacts: Vec<SyncContact> = (1..=6)
        .map(|contact_id| SyncContact { contact_id })
        .collect();
    for result in producer.enqueue_many(&contacts).await {
        result?;
    }

    let api = Arc::new(RateLimitedApi {
        calls: AtomicU32::new(0),
    });
    let report = Worker::<AppQueues>::builder(engine)
        .handler(SyncHandler { api })
        .concurrency(2)
        .poll_interval(Duration::from_millis(20))
        .build()?
        .run_until(
            tokio::time::sleep(Duration::from_secs(2)),
            Duration::from_secs(1),
        )
        .await?;
    println!(
        "succeeded {}, deferred {}, dead-lettered {}",
        report.succeeded, report.deferred, report.dead_lettered
    );
    Ok(())
}
