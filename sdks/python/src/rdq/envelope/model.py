"""The v1 envelope as Python values (docs/envelope.md).

Timestamps are kept as their wire strings (`2026-07-20T14:03:22.117Z`):
the wire allows year 0000, which `datetime` cannot hold, and the string is
already the one canonical spelling; `rules.parse_timestamp` gives a
`datetime`. `extra` holds the members this version does not know, and
`omitted` the optional members the writer left out, so an envelope comes
back byte for byte as it was read. `dead_reason` is the other way round:
an unset reason is left out unless its writer wrote it as null
(`dead_reason_null`), and so is `cancel_requested` (`cancel_requested_null`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

from ._json import Json, JsonNumber, to_python

VERSION = 1


class Status(StrEnum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"


class Outcome(StrEnum):
    SUCCESS = "SUCCESS"
    RETRYABLE_FAILURE = "RETRYABLE_FAILURE"
    PERMANENT_FAILURE = "PERMANENT_FAILURE"
    LEASE_EXPIRED = "LEASE_EXPIRED"


@dataclass
class ErrorInfo:
    """The error of a failed attempt."""

    type: str
    message: str
    detail: Json = None
    stack: str | None = None
    extra: dict[str, Json] = field(default_factory=dict)
    omitted: set[str] = field(default_factory=set)


@dataclass
class Attempt:
    """One execution of a task; `finished_at` and `outcome` are None while
    it runs."""

    attempt_no: int
    started_at: str
    finished_at: str | None = None
    outcome: Outcome | None = None
    error: ErrorInfo | None = None
    extra: dict[str, Json] = field(default_factory=dict)
    omitted: set[str] = field(default_factory=set)


class DeadReasonCode(StrEnum):
    """The reason codes rdq writes. Readers meet newer ones too: any code
    `rules.is_valid_dead_reason_code` accepts is kept as written."""

    ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED"
    """A failure spent the last of the queue's max_attempts (a lapsed lease
    counts as a failed attempt)."""
    PERMANENT_FAILURE = "PERMANENT_FAILURE"
    """The handler's failure was permanent."""
    LEASE_EXPIRIES_EXHAUSTED = "LEASE_EXPIRIES_EXHAUSTED"
    """The lease lapsed max_lease_expiries times: a handler that keeps
    killing its worker."""
    CANCELLED = "CANCELLED"
    """Cancelled by an operator or a program: while PENDING, or while it ran
    and its handler then did not succeed."""
    HANDLER_VERSION_MISMATCH = "HANDLER_VERSION_MISMATCH"
    """The task's handler_version is not the worker's and the queue
    dead-letters such tasks."""
    COUNTERS_EXHAUSTED = "COUNTERS_EXHAUSTED"
    """A counter reached its maximum, so the task could never run again."""


@dataclass
class DeadReason:
    """Why a task is DEAD: the cause (`code`, a `DeadReasonCode` or a newer
    code), when (`at`), who or what decided (`by`: `worker`, `reaper`, or
    the principal that cancelled it), and details for people (`message`,
    None when null or left out)."""

    code: str
    at: str
    by: str
    message: str | None = None
    extra: dict[str, Json] = field(default_factory=dict)
    omitted: set[str] = field(default_factory=set)


@dataclass
class CancelRequest:
    """A cancel asked of a task while it ran: when (`at`), who asked (`by`,
    a principal's name) and why (`message`, None when null or left out).
    The worker holding the lease is told; a handler that then does not
    succeed ends the task DEAD with reason CANCELLED. Kept as history once
    the task has finished; a redrive removes it."""

    at: str
    by: str
    message: str | None = None
    extra: dict[str, Json] = field(default_factory=dict)
    omitted: set[str] = field(default_factory=set)


@dataclass
class Envelope:
    """A task. Decode with `rdq.envelope.decode`, encode with `encode`."""

    id: str
    queue: str
    handler_ref: str
    payload: bytes
    payload_content_type: str
    status: Status
    created_at: str
    handler_version: str | None = None
    payload_ref: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    deferral_count: int = 0
    attempt_count: int = 0
    redrive_count: int = 0
    claim_count: int = 0
    next_attempt_at: str | None = None
    lease_expires_at: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    dead_reason: DeadReason | None = None
    """Why the task is DEAD; None while it is not (or when its writer
    predates the member)."""
    cancel_requested: CancelRequest | None = None
    """The cancel asked of the task while it ran; None when none was (or
    when its writer predates the member)."""
    extra: dict[str, Json] = field(default_factory=dict)
    omitted: set[str] = field(default_factory=set)
    dead_reason_null: bool = False
    """`dead_reason` was written as null: kept so while the reason is unset."""
    cancel_requested_null: bool = False
    """`cancel_requested` was written as null: kept so while it is unset."""
    envelope_version: int = VERSION

    @property
    def flow_key(self) -> str | None:
        return self.headers.get("rdq.flow_key")

    @property
    def last_error(self) -> ErrorInfo | None:
        for attempt in reversed(self.attempts):
            if attempt.error is not None:
                return attempt.error
        return None

    def mark_written(self) -> None:
        """Marks every optional member as written, as rdq does for each
        envelope it changes, so one state has one encoding (`payload_ref`
        excepted: it is never populated; an unset dead reason or cancel
        request is left out)."""
        self.omitted &= {"payload_ref"}
        self.dead_reason_null = False
        self.cancel_requested_null = False

    def payload_json(self) -> object:
        """The payload parsed as JSON (numbers as int or float)."""
        return json.loads(self.payload)

    def extra_value(self, key: str) -> object:
        """An unknown member as plain Python data."""
        return to_python(self.extra[key])


__all__ = [
    "VERSION",
    "Attempt",
    "CancelRequest",
    "DeadReason",
    "DeadReasonCode",
    "Envelope",
    "ErrorInfo",
    "Json",
    "JsonNumber",
    "Outcome",
    "Status",
]
