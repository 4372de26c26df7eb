//! A `Producer<AppQueues>` cannot enqueue another application's job.

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
#[job(queue = AppQueues::Emails)]
struct SendEmail {
    to: String,
}

#[derive(Serialize, Deserialize, Job)]
#[job(queue = OtherQueues::Reports)]
struct BuildReport {
    id: u64,
}

async fn wrong_queue_set(producer: Producer<AppQueues>) {
    producer.enqueue(&SendEmail { to: "a@b.c".into() }).await.unwrap();
    producer.enqueue(&BuildReport { id: 1 }).await.unwrap();
}

fn main() {}
