//! The error types rdq itself records in a task's attempt history, in one
//! place: every `rdq.*` `type` a reader of a DLQ can meet, so classification
//! globs (`rdq.*`), dashboards and the SDKs of every language name them
//! alike. Handlers' own errors carry their language's type names instead.

/// A lease lapsed with no outcome (a crashed worker, an overrun handler).
pub const LEASE_EXPIRED: &str = "rdq.LeaseExpired";
/// The handler panicked (Rust) or threw an `Error` the SDK caught.
pub const PANIC: &str = "rdq.Panic";
/// The SDK has no handler registered for the task's `handler_ref`.
pub const NO_HANDLER: &str = "rdq.NoHandler";
/// The payload does not decode into the job type.
pub const UNDECODABLE_PAYLOAD: &str = "rdq.UndecodablePayload";
/// The task's `handler_version` differs from the worker's and the queue
/// says `handler_version_mismatch = "dead"`.
pub const HANDLER_VERSION_MISMATCH: &str = "rdq.HandlerVersionMismatch";
/// A queue's `OutcomeMapper` panicked.
pub const OUTCOME_MAPPER_PANIC: &str = "rdq.OutcomeMapperPanic";
/// A deferral recorded as an error (the SDK's `defer` out of a handler's error path).
pub const DEFERRED: &str = "rdq.Deferred";
/// The handler was stopped because a cancel was asked of its task while it
/// ran (the task then ends DEAD with reason `CANCELLED`).
pub const CANCELLED: &str = "rdq.Cancelled";
