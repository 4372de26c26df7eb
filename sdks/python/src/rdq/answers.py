"""What the server answers, as values: batch results, task and DLQ pages,
redrive, cancel and reason counts, queue counts, claimed tasks, settle
results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .envelope import Envelope
from .errors import RdqError, error_for


@dataclass(frozen=True)
class SubmitResult:
    """One item of a batch submit: `status` 201 (created), 200 (an
    idempotent repeat, or a unique key's holder that took the submit with
    `on_conflict` `replace` or `debounce`, or met with `existing`:
    `envelope` is that task) or an
    error status with its `code`. With `UNIQUE_HELD`, `holder` is the task
    that holds the item's key and `hold` its hold. `problem` is the refusal's whole problem document, and
    `error` the exception a single submit would have raised."""

    status: int
    envelope: Envelope | None = None
    code: str | None = None
    detail: str | None = None
    holder: str | None = None
    hold: str | None = None
    problem: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.status in (200, 201)

    @property
    def error(self) -> RdqError | None:
        """The refusal as the SDK's exception (`UniqueHeld` for
        `UNIQUE_HELD`, …), not raised; None for a stored item."""
        if self.ok or self.code is None:
            return None
        return error_for(self.status, self.code, self.detail or "", self.problem or None)


@dataclass(frozen=True)
class DeadPage:
    """A page of the DLQ, newest first; pass `next_cursor` for the next."""

    items: list[Envelope]
    next_cursor: str | None


@dataclass(frozen=True)
class TaskPage:
    """A page of a queue's tasks, newest first; pass `next_cursor` (None on
    the last page) as `cursor` for the next."""

    items: list[Envelope]
    next_cursor: str | None


@dataclass(frozen=True)
class RedriveResult:
    queue: str
    dry_run: bool
    count: int
    ids: list[str]


@dataclass(frozen=True)
class CancelResult:
    """The tasks a cancel reached, or would have on a dry run: `ids` every
    one; `running` those of them that were running, asked to stop (their
    workers are told, and they end DEAD with reason CANCELLED unless their
    handler succeeds first). The others were PENDING and are DEAD now."""

    queue: str
    dry_run: bool
    count: int
    ids: list[str]
    running: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ReasonCount:
    """How many dead tasks of a queue died for one reason (`UNRECORDED`:
    dead with no reason recorded)."""

    reason: str
    count: int


@dataclass(frozen=True)
class QueueCounts:
    """Tasks per status; `None` where the store cannot count (a broker)."""

    queue: str
    pending: int | None
    in_flight: int | None
    succeeded: int | None
    dead: int | None
    source: str


@dataclass(frozen=True)
class LeasedTask:
    """A claimed task and the token to settle or extend it with."""

    id: str
    lease_token: str
    envelope: Envelope


@dataclass(frozen=True)
class SettleResult:
    """One settle's result: the new envelope (when asked for), or why it
    was refused (`LEASE_LOST`)."""

    id: str
    status: int
    envelope: Envelope | None = None
    code: str | None = None
    detail: str | None = None
