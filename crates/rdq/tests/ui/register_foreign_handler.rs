//! A `Worker<AppQueues>` cannot register a handler for another application's job.

use rdq::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    Emails,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum OtherQueues {
    Reports,
}

#[derive(Serialize, Deserialize, Job)]
#[job(queue = OtherQueues::Reports)]
struct BuildReport {
    id: u64,
}

struct ReportHandler;

impl JobHandler for ReportHandler {
    type Job = BuildReport;
    type Output = ();
    type Error = JobError;

    async fn handle(&self, _job: BuildReport, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn wrong_queue_set(engine: rdq::Engine) {
    let _worker = Worker::<AppQueues>::builder(engine).handler(ReportHandler);
}

fn main() {}
