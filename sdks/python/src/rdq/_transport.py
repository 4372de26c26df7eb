"""What the worker needs from a way of talking to the server: tasks in,
settles and lease extensions out. `GrpcTransport` (the `Work` stream) and
`HttpTransport` (claims and batch settles) implement it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from .envelope import CancelRequest
from .outcome import Kind, Outcome


@dataclass(slots=True)
class Settle:
    """One settle waiting to be sent; `stream` is the worker's Work stream
    the task came on (of its `streams`) and `generation` which opening of
    it, `quiet` says a LEASE_LOST answer is expected."""

    id: str
    lease_token: str
    outcome: Outcome
    generation: int = 0
    quiet: bool = False
    stream: int = 0

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"id": self.id, "lease_token": self.lease_token, "outcome": self.outcome.kind.value}
        o = self.outcome
        if o.error is not None:
            body["error"] = o.error.to_json()
        if o.kind is Kind.DEFER:
            body["defer_ms"] = o.defer_ms or 0
            if o.throttle is not None:
                body["throttle"] = o.throttle
        return body


@dataclass(frozen=True)
class Extension:
    """A lease extension's answer: whether the lease is kept, and whether a
    cancel was asked of the task (`request` when the answer says who asked;
    a bare stream ack only says that one was)."""

    kept: bool
    cancel_requested: bool = False
    request: CancelRequest | None = None


class Transport(Protocol):
    async def receive(self) -> None:
        """Hands tasks to the worker (`Worker.accept`) until cancelled;
        raises only for what retrying cannot fix (a bad hello, no permission)."""

    def stop_receiving(self) -> None:
        """Asks for no more tasks (shutdown has begun)."""

    def settle(self, s: Settle) -> None:
        """Queues a settle; it is sent with others in one batch."""

    async def extend(self, task_id: str, lease_token: str, extend_ms: int, stream: int = 0) -> Extension:
        """Extends a lease (of a task that came on `stream`); `kept` False
        when it is lost."""

    async def flush(self) -> None:
        """Waits until every queued settle has been answered."""

    async def close(self) -> None: ...


def lease_duration_ms(lease_expires_at: str | None, started_at: str | None, default: int) -> int:
    """The lease as the server granted it: its end minus the attempt's
    start, both the server's clock, so local clock skew does not matter."""
    if not lease_expires_at or not started_at:
        return default
    try:
        end = datetime.fromisoformat(lease_expires_at)
        start = datetime.fromisoformat(started_at)
    except ValueError:
        return default
    return max(1, int((end - start).total_seconds() * 1000))
