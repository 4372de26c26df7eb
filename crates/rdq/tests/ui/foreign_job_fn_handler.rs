//! An async closure does not launder another application's job into a worker.

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

fn wrong_queue_set(engine: rdq::Engine) {
    let _worker = Worker::<AppQueues>::builder(engine).handler_fn(
        |_job: BuildReport, _ctx: JobContext| async move { Ok::<(), JobError>(()) },
    );
}

fn main() {}
