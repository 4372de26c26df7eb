//! The crate's one error type. Every variant maps onto a stable engine code,
//! so callers above the store branch on `EngineError::code()`, never on AMQP
//! text.

use rdq_engine::EngineError;

/// Why the RabbitMQ store could not do something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RabbitError {
    /// The store URL or an option in it is malformed.
    #[error("INVALID_STORE_URL: {0}")]
    InvalidUrl(String),
    /// The AMQP client or the broker failed (connection, channel, protocol).
    #[error("STORE_UNAVAILABLE: RabbitMQ: {0}")]
    Amqp(String),
    /// A `mandatory` publish came back unroutable: the target queue is missing.
    #[error(
        "STORE_UNAVAILABLE: RabbitMQ returned the message published to `{queue}` as unroutable ({reason})"
    )]
    Returned {
        /// The routing key (queue) of the publish.
        queue: String,
        /// The broker's reply text.
        reason: String,
    },
    /// A publish was sent and the connection or channel failed before the
    /// broker confirmed it: it may or may not have been stored, so it is
    /// not sent again (a second copy would run the task twice).
    #[error(
        "STORE_UNAVAILABLE: the connection to RabbitMQ failed before the broker confirmed the message published to `{queue}` ({reason}); it may or may not have been stored"
    )]
    Unconfirmed {
        /// The routing key (queue) of the publish.
        queue: String,
        /// What failed.
        reason: String,
    },
    /// The broker refused a publish (`basic.nack`).
    #[error("STORE_UNAVAILABLE: RabbitMQ refused (nacked) the message published to `{0}`")]
    Nacked(String),
    /// The store was closed; nothing reconnects any more.
    #[error("STORE_UNAVAILABLE: the RabbitMQ store is closed")]
    Closed,
    /// The reconnect policy gave up.
    #[error(
        "STORE_UNAVAILABLE: gave up reconnecting to RabbitMQ after {attempts} attempts: {last}"
    )]
    ReconnectExhausted {
        /// Failed attempts in a row.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The broker did not answer within the operation timeout
    /// (`op_timeout_ms`): the connection is down and not back yet, or the
    /// queue cannot take messages (a quorum queue without a leader). A
    /// publish that timed out may or may not have been stored.
    #[error("STORE_UNAVAILABLE: RabbitMQ did not answer {what} within {after_ms} ms")]
    TimedOut {
        /// What was waiting, e.g. "the publish to `q`".
        what: String,
        /// The operation timeout.
        after_ms: u64,
    },
    /// A delay longer than a hold queue can express (about 24.8 days).
    #[error("INVALID_ARGUMENT: a delay of {0} ms is longer than a RabbitMQ hold queue can hold")]
    DelayTooLong(u64),
    /// A queue name that leaves no room for its broker queues' names.
    #[error(
        "INVALID_QUEUE_NAME: `{0}` is too long for RabbitMQ once its hold queue suffix is added (255-byte limit)"
    )]
    NameTooLong(String),
}

impl RabbitError {
    /// [`RabbitError::TimedOut`] for `what`, after `after`.
    pub(crate) fn timed_out(what: impl Into<String>, after: std::time::Duration) -> Self {
        Self::TimedOut {
            what: what.into(),
            after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The stable code, the same string that starts the display form.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidUrl(_) => "INVALID_STORE_URL",
            Self::DelayTooLong(_) => "INVALID_ARGUMENT",
            Self::NameTooLong(_) => "INVALID_QUEUE_NAME",
            Self::Amqp(_)
            | Self::Returned { .. }
            | Self::Unconfirmed { .. }
            | Self::Nacked(_)
            | Self::Closed
            | Self::TimedOut { .. }
            | Self::ReconnectExhausted { .. } => "STORE_UNAVAILABLE",
        }
    }
}

impl From<lapin::Error> for RabbitError {
    fn from(e: lapin::Error) -> Self {
        Self::Amqp(e.to_string())
    }
}

impl From<RabbitError> for EngineError {
    fn from(e: RabbitError) -> Self {
        match e {
            RabbitError::DelayTooLong(_) | RabbitError::InvalidUrl(_) => {
                EngineError::InvalidArgument(e.to_string())
            }
            RabbitError::NameTooLong(name) => {
                EngineError::Envelope(rdq_envelope::EnvelopeError::new(
                    rdq_envelope::ErrorCode::InvalidQueueName,
                    format!(
                        "`{name}` is too long for RabbitMQ once its hold queue suffix is added"
                    ),
                ))
            }
            other => EngineError::Unavailable(other.to_string()),
        }
    }
}
