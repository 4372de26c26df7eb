//! The broker queues behind one rdq queue, their names and their declaration
//! arguments. Everything here is pure, so it is unit-tested without a broker.
//!
//! | queue | role | arguments |
//! |---|---|---|
//! | `q` | work queue | `x-max-priority` ([`crate::RabbitOptions::max_priority`], queuey's 10 by default) |
//! | `q.dead` | dead letters | none |
//! | `q.deferred.{ttl_ms}` | queuey-mode hold queue (classic) | `x-message-ttl = ttl`, `x-dead-letter-exchange = ""`, `x-dead-letter-routing-key = q`, `x-expires = 2 × ttl` |
//! | `q.rdq-hold.{ttl_ms}` | rdq-mode hold queue (quorum) | the same plus `x-queue-type = quorum`, `x-dead-letter-strategy = at-least-once`, `x-overflow = reject-publish` |
//!
//! The first three are exactly queuey 1.1's, argument types included (RabbitMQ
//! refuses a redeclaration whose arguments differ, so "the same" has to mean
//! byte for byte). A hold queue's arguments are a pure function of its name,
//! so two processes never disagree about one. Every wait goes through a hold
//! queue, never a per-message `expiration`: RabbitMQ only expires the message
//! at a queue's head, so mixed delays in one queue would block each other.
//! One TTL per queue keeps each hold queue draining in publish order, and
//! rounding delays *up* to a granularity bounds how many hold queues exist
//! while never releasing a task early.
//!
//! Why rdq mode differs: a classic queue dead-letters *at most once* (if the
//! hop back to `q` fails, the message is gone), which is what queuey relies
//! on. A quorum queue with `at-least-once` dead-lettering keeps the message
//! until `q` has confirmed it. The names differ so the two kinds of hold
//! queue never meet with different arguments.

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString};

/// Longest AMQP short string, hence longest queue name.
pub const MAX_NAME_BYTES: usize = 255;
/// Suffix of a dead-letter queue (queuey's default).
pub const DEAD_SUFFIX: &str = ".dead";
/// Infix of a queuey-mode hold queue (queuey's default).
pub const QUEUEY_HOLD_INFIX: &str = ".deferred.";
/// Infix of an rdq-mode (quorum) hold queue.
pub const RDQ_HOLD_INFIX: &str = ".rdq-hold.";
/// Longest delay a hold queue expresses: half of RabbitMQ's 32-bit TTL,
/// because `x-expires` is twice the TTL (about 24.8 days).
pub const MAX_HOLD_MS: u32 = u32::MAX / 2;

/// Header naming why a task was dead-lettered.
pub const HEADER_DEATH_REASON: &str = "x-death-reason";
/// Header naming the queue a dead letter came from.
pub const HEADER_ORIGINAL_QUEUE: &str = "x-original-queue";
/// Header counting the attempts a dead letter made.
pub const HEADER_ATTEMPTS: &str = "x-attempts";
/// Header mirroring the attempt this delivery is (1-based), on every publish.
pub const HEADER_ATTEMPT: &str = "x-attempt";
/// Header mirroring the deferral count, on every publish.
pub const HEADER_DEFERRALS: &str = "x-deferrals";
/// The reason recorded for bodies that are no envelope at all (queuey's text).
pub const REASON_MALFORMED: &str = "malformed envelope";

/// Which wire format and hold queues a queue uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// queuey 1.1's envelope and classic hold queues: shareable with queuey processes.
    Queuey,
    /// rdq's v1 envelope (attempt history included) and quorum hold queues.
    Rdq,
}

/// The broker queues of one rdq queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The work queue.
    pub work: String,
    /// The dead-letter queue.
    pub dead: String,
}

impl Names {
    /// The queues of `queue` under `namespace`, or `NameTooLong` when its
    /// longest hold queue name would not fit in 255 bytes.
    pub fn new(namespace: &str, queue: &str) -> Option<Self> {
        let work = format!("{namespace}{queue}");
        let longest = hold_name(&work, Mode::Rdq, MAX_HOLD_MS)
            .len()
            .max(hold_name(&work, Mode::Queuey, MAX_HOLD_MS).len());
        (longest <= MAX_NAME_BYTES).then(|| Self {
            dead: format!("{work}{DEAD_SUFFIX}"),
            work,
        })
    }

    /// The hold queue for `ttl_ms`-long waits in `mode`.
    pub fn hold(&self, mode: Mode, ttl_ms: u32) -> String {
        hold_name(&self.work, mode, ttl_ms)
    }
}

fn hold_name(work: &str, mode: Mode, ttl_ms: u32) -> String {
    let infix = match mode {
        Mode::Queuey => QUEUEY_HOLD_INFIX,
        Mode::Rdq => RDQ_HOLD_INFIX,
    };
    format!("{work}{infix}{ttl_ms}")
}

/// The hold queue TTL for a wait of `delay_ms`: rounded **up** to a whole
/// multiple of `granularity_ms` (at least one step), or `None` past
/// [`MAX_HOLD_MS`] (refused, never shortened). A zero delay needs no hold.
pub fn hold_ttl_ms(delay_ms: u64, granularity_ms: u64) -> Option<u32> {
    let step = granularity_ms.clamp(1, u64::from(MAX_HOLD_MS));
    let ttl = delay_ms.div_ceil(step).saturating_mul(step).max(step);
    u32::try_from(ttl).ok().filter(|t| *t <= MAX_HOLD_MS)
}

/// Every queue here is durable, never exclusive, never auto-deleted.
pub fn declare_options() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        nowait: false,
    }
}

/// Arguments of the work queue: `x-max-priority` (as queuey types it), or
/// none when priorities are off (`0`).
pub fn work_args(max_priority: u8) -> FieldTable {
    let mut args = FieldTable::default();
    if max_priority > 0 {
        args.insert(
            "x-max-priority".into(),
            AMQPValue::ShortShortUInt(max_priority),
        );
    }
    args
}

/// Arguments of the dead-letter queue: none (dead letters wait for an operator).
pub fn dead_args() -> FieldTable {
    FieldTable::default()
}

/// Arguments of a hold queue releasing onto `work` after `ttl_ms`.
pub fn hold_args(mode: Mode, work: &str, ttl_ms: u32) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-message-ttl".into(),
        AMQPValue::LongLongInt(ttl_ms.into()),
    );
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(work)),
    );
    let expires = (u64::from(ttl_ms) * 2).min(u64::from(u32::MAX));
    args.insert(
        "x-expires".into(),
        AMQPValue::LongLongInt(i64::try_from(expires).unwrap_or(i64::from(u32::MAX))),
    );
    if mode == Mode::Rdq {
        args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        args.insert(
            "x-dead-letter-strategy".into(),
            AMQPValue::LongString(LongString::from("at-least-once")),
        );
        args.insert(
            "x-overflow".into(),
            AMQPValue::LongString(LongString::from("reject-publish")),
        );
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_up_to_the_granularity_and_never_down() {
        assert_eq!(hold_ttl_ms(1, 1_000), Some(1_000));
        assert_eq!(hold_ttl_ms(1_000, 1_000), Some(1_000));
        assert_eq!(hold_ttl_ms(1_001, 1_000), Some(2_000));
        assert_eq!(hold_ttl_ms(29_200, 1_000), Some(30_000));
        assert_eq!(
            hold_ttl_ms(250, 0),
            Some(250),
            "a zero granularity is one ms"
        );
        assert_eq!(
            hold_ttl_ms(30 * 86_400_000, 1_000),
            None,
            "too long is refused"
        );
    }

    #[test]
    fn names_follow_queuey_and_leave_room_for_hold_queues() {
        let names = Names::new("", "myapp.emails").unwrap_or_else(|| unreachable!());
        assert_eq!(names.dead, "myapp.emails.dead");
        assert_eq!(
            names.hold(Mode::Queuey, 30_000),
            "myapp.emails.deferred.30000"
        );
        assert_eq!(names.hold(Mode::Rdq, 30_000), "myapp.emails.rdq-hold.30000");
        assert!(Names::new("", &"q".repeat(236)).is_none());
        assert!(Names::new("", &"q".repeat(235)).is_some());
    }

    #[test]
    fn queuey_hold_arguments_are_exactly_queueys() {
        let args = hold_args(Mode::Queuey, "myapp.emails", 30_000);
        let get = |k: &str| args.inner().get(k).cloned();
        assert_eq!(get("x-message-ttl"), Some(AMQPValue::LongLongInt(30_000)));
        assert_eq!(get("x-expires"), Some(AMQPValue::LongLongInt(60_000)));
        assert_eq!(
            get("x-dead-letter-routing-key"),
            Some(AMQPValue::LongString("myapp.emails".into()))
        );
        assert_eq!(
            get("x-dead-letter-exchange"),
            Some(AMQPValue::LongString("".into()))
        );
        assert_eq!(args.inner().len(), 4);
        assert_eq!(
            work_args(10).inner().get("x-max-priority"),
            Some(&AMQPValue::ShortShortUInt(10))
        );
        assert!(work_args(0).inner().is_empty());
    }

    #[test]
    fn rdq_hold_queues_dead_letter_at_least_once() {
        let args = hold_args(Mode::Rdq, "q", 1_000);
        let get = |k: &str| args.inner().get(k).cloned();
        assert_eq!(
            get("x-queue-type"),
            Some(AMQPValue::LongString("quorum".into()))
        );
        assert_eq!(
            get("x-dead-letter-strategy"),
            Some(AMQPValue::LongString("at-least-once".into()))
        );
        assert_eq!(
            get("x-overflow"),
            Some(AMQPValue::LongString("reject-publish".into()))
        );
    }
}
