//! Names the envelope would refuse (`[a-z0-9._-]{1,240}`) are compile errors.

use rdq::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    Emails,
}

#[derive(Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Emails, name = "Send Email")]
struct SendEmail {
    to: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "shop")]
enum BadQueues {
    #[queue(name = "Images/Resize")]
    Images,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum DuplicateQueues {
    Orders,
    #[queue(name = "orders")]
    Refunds,
}

fn main() {}
