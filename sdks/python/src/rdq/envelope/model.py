"""The v1 envelope as Python values (docs/envelope.md).

Timestamps are kept as their wire strings (`2026-07-20T14:03:22.117Z`):
the wire allows year 0000, which `datetime` cannot hold, and the string is
already the one canonical spelling; `rules.parse_timestamp` gives a
`datetime`. `extra` holds the members this version does not know, and
`omitted` the optional members the writer left out, so an envelope comes
back byte for byte as it was read.
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
    extra: dict[str, Json] = field(default_factory=dict)
    omitted: set[str] = field(default_factory=set)
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

    def payload_json(self) -> object:
        """The payload parsed as JSON (numbers as int or float)."""
        return json.loads(self.payload)

    def extra_value(self, key: str) -> object:
        """An unknown member as plain Python data."""
        return to_python(self.extra[key])


__all__ = ["VERSION", "Attempt", "Envelope", "ErrorInfo", "Json", "JsonNumber", "Outcome", "Status"]
