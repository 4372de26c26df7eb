//! rdq in one file, on the embedded store: declare queues and jobs, enqueue,
//! run a worker, shut it down gracefully, and look at what happened.
//!
//! ```sh
//! cargo run -p rdq --example quickstart
//! ```
//!
//! Three emails succeed, one fails twice before it gets through, and one is
//! refused permanently and lands in the DLQ, where the dead-letter hook hears
//! of it. The data directory survives the run: run it again and the DLQ has
//! one more entry.

use std::time::Duration;

use rdq::prelude::*;
use rdq::{Backoff, QueuePolicy};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "quickstart")]
enum AppQueues {
    Emails,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Emails)]
struct SendEmail {
    to: String,
    /// Fail (retryably) this many times before succeeding.
    flaky_for: u32,
}

struct EmailHandler;

impl JobHandler for EmailHandler {
    type Job = SendEmail;
    type Output = ();
    type Error = JobError;

    async fn handle(&self, job: SendEmail, ctx: JobContext) -> Result<(), JobError> {
        if !job.to.contains('@') {
            // Retrying cannot help: straight to the DLQ.
            return Err(rdq::permanent(JobError::new(
                "mail.InvalidAddress",
                format!("{:?} is not an address", job.to),
            )));
        }
        if ctx.attempt <= job.flaky_for {
            return Err(JobError::new(
                "smtp.ConnectionReset",
                "connection reset by peer",
            ));
        }
        println!(
            "sent to {} (attempt {} of {})",
            job.to, ctx.attempt, ctx.max_attempts
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), rdq::Error> {
    let dir = std::env::temp_dir().join("rdq-quickstart");
    let engine = rdq::open_embedded(&dir)?;
    println!("data directory: {}", dir.display());

    // Queue policy lives with the queue and is live: retry fast for the demo.
    engine
        .set_policy(
            AppQueues::Emails.name(),
            &QueuePolicy {
                max_attempts: 5,
                backoff: Backoff::Fixed { delay_ms: 100 },
                ..QueuePolicy::default()
            },
        )
        .await?;

    let producer = Producer::<AppQueues>::new(engine.clone());
    let emails = [
        ("ada@example.com", 0),
        ("grace@example.com", 0),
        ("edsger@example.com", 2),
        ("barbara@example.com", 0),
        ("not-an-address", 0),
    ];
    for (to, flaky_for) in emails {
        let job = SendEmail {
            to: to.into(),
            flaky_for,
        };
        producer
            .enqueue_with(
                &job,
                EnqueueOptions::now().correlation_id(format!("signup-{to}")),
            )
            .await?;
    }

    let worker = Worker::<AppQueues>::builder(engine.clone())
        .handler(EmailHandler)
        .concurrency(8)
        .on_dead_letter(|dead: DeadLetter| async move {
            if let Some(error) = dead.error() {
                println!(
                    "dead letter ({:?}): {} {}",
                    dead.cause, error.error_type, error.message
                );
            }
        })
        .build()?
        .start();

    // A service would wait for ctrl-c (see `Worker::run_until`); the demo waits for its jobs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = worker.shutdown(Duration::from_secs(5)).await?;
    println!(
        "succeeded {}, retried {}, dead-lettered {}",
        report.succeeded, report.retried, report.dead_lettered
    );
    Ok(())
}
