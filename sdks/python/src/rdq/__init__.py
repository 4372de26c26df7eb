"""rdq's Python SDK: a client for rdq's HTTP and gRPC APIs, a worker on
the gRPC `Work` stream, schedules, sources, the outcome ladder, and the v1
envelope codec.

Installed as the distribution `rdq-sdk`; imported as `rdq`.
"""

from ._calls import UNRECORDED, OnConflict, Submit, Unique, UniqueHold, UniqueScope
from .answers import (
    CancelResult,
    DeadPage,
    LeasedTask,
    QueueCounts,
    ReasonCount,
    RedriveResult,
    SettleResult,
    SubmitResult,
    TaskPage,
)
from .client import AsyncClient, Client
from .context import TaskContext
from .envelope import CancelRequest, DeadReason, DeadReasonCode, Envelope, EnvelopeError, Status
from .errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    RdqError,
    ServerError,
    Unauthenticated,
    Unavailable,
    UniqueHeld,
    Unsupported,
)
from .outcome import (
    CANCELLED_ERROR_TYPE,
    Defer,
    Kind,
    Outcome,
    OutcomeMapper,
    Permanent,
    ReportedError,
    Retryable,
    error_type_of,
)
from .schedules import CatchUp, Overlap, Schedule, ScheduleOwner, ScheduleState, ScheduleTask
from .sources import SourceKind, SourcePartition, SourceState, SourceStatus
from .worker import Worker

__all__ = [
    "CANCELLED_ERROR_TYPE",
    "UNRECORDED",
    "AsyncClient",
    "CancelRequest",
    "CancelResult",
    "CatchUp",
    "Client",
    "Conflict",
    "DeadPage",
    "DeadReason",
    "DeadReasonCode",
    "Defer",
    "Envelope",
    "EnvelopeError",
    "Forbidden",
    "InvalidRequest",
    "Kind",
    "LeaseLost",
    "LeasedTask",
    "NotFound",
    "OnConflict",
    "Outcome",
    "OutcomeMapper",
    "Overlap",
    "PayloadTooLarge",
    "Permanent",
    "QueueCounts",
    "RdqError",
    "ReasonCount",
    "RedriveResult",
    "ReportedError",
    "Retryable",
    "Schedule",
    "ScheduleOwner",
    "ScheduleState",
    "ScheduleTask",
    "ServerError",
    "SettleResult",
    "SourceKind",
    "SourcePartition",
    "SourceState",
    "SourceStatus",
    "Status",
    "Submit",
    "SubmitResult",
    "TaskContext",
    "TaskPage",
    "Unauthenticated",
    "Unavailable",
    "Unique",
    "UniqueHeld",
    "UniqueHold",
    "UniqueScope",
    "Unsupported",
    "Worker",
    "error_type_of",
]
