"""`TaskContext`: what a handler knows about the task it runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .envelope import CancelRequest, Envelope


class _Fields(Protocol):
    """What a context reads its task's fields from: an `rdq.v1.Envelope`
    message (the Work stream) or `_Given` values."""

    @property
    def queue(self) -> str: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def attempt_count(self) -> int: ...
    @property
    def deferral_count(self) -> int: ...
    @property
    def redrive_count(self) -> int: ...


@dataclass(frozen=True, slots=True)
class _Given:
    """A task's fields given one by one (`TaskContext(...)`)."""

    queue: str
    payload: bytes
    headers: Mapping[str, str]
    attempt_count: int
    deferral_count: int
    redrive_count: int


class TaskContext:
    """The running task: its id, payload, headers and counters, the full
    envelope on demand, and whether the run was cancelled.

    A sync handler polls `cancelled` (or waits on `cancelled_event`) at
    safe points; an async handler is cancelled with `asyncio.CancelledError`
    instead. A run is cancelled when a cancel is asked of its task
    (`cancel_request` says who asked, when and why; what the handler then
    does is reported: a return is still a success, anything else a failure
    of type `rdq.Cancelled`), when its lease is lost (the task was
    reclaimed or deleted), or when the worker shuts down and the grace
    period has passed; in those two cases its outcome is not reported."""

    __slots__ = (
        "_cancelled",
        "_envelope",
        "_event",
        "_fields",
        "_load",
        "cancel_reason",
        "cancel_request",
        "handler_ref",
        "id",
        "lease_token",
    )  # fmt: skip

    def __init__(
        self,
        *,
        id: str,
        lease_token: str,
        queue: str,
        handler_ref: str,
        payload: bytes,
        headers: Mapping[str, str],
        attempt: int,
        deferral_count: int,
        redrive_count: int,
        load: Callable[[], Envelope],
    ) -> None:
        given = _Given(queue, payload, headers, attempt, deferral_count, redrive_count)
        self._start(id, lease_token, handler_ref, given, load)

    @classmethod
    def _of_message(cls, id: str, lease_token: str, message: Any, load: Callable[[], Envelope]) -> TaskContext:
        """The context of a task that came as an `rdq.v1.Envelope` message
        (the Work stream): its fields are read from the message when asked
        for, as most handlers ask for few of them."""
        ctx = cls.__new__(cls)
        ctx._start(id, lease_token, message.handler_ref, message, load)
        return ctx

    def _start(
        self, id: str, lease_token: str, handler_ref: str, fields: _Fields, load: Callable[[], Envelope]
    ) -> None:
        self.id = id
        self.lease_token = lease_token
        self.handler_ref = handler_ref
        self._fields = fields
        self.cancel_reason: str | None = None
        """Why the run was cancelled, for people; None while it runs on."""
        self.cancel_request: CancelRequest | None = None
        """The cancel asked of the task while it ran (`at`, `by`, `message`);
        None when none was."""
        self._load = load
        self._envelope: Envelope | None = None
        self._cancelled = False
        # Made on first use: most runs are never waited on.
        self._event: threading.Event | None = None

    @property
    def queue(self) -> str:
        return self._fields.queue

    @property
    def payload(self) -> bytes:
        """The payload's bytes."""
        return self._fields.payload

    @property
    def headers(self) -> Mapping[str, str]:
        return self._fields.headers

    @property
    def attempt(self) -> int:
        """This attempt's number since submit or the last redrive (1 first)."""
        return self._fields.attempt_count

    @property
    def deferral_count(self) -> int:
        return self._fields.deferral_count

    @property
    def redrive_count(self) -> int:
        return self._fields.redrive_count

    @property
    def envelope(self) -> Envelope:
        """The task as claimed: IN_FLIGHT, its open attempt last."""
        if self._envelope is None:
            self._envelope = self._load()
        return self._envelope

    @property
    def flow_key(self) -> str | None:
        return self.headers.get("rdq.flow_key")

    def json(self) -> Any:
        """The payload parsed as JSON."""
        return json.loads(self.payload)

    @property
    def cancelled(self) -> bool:
        """The run was cancelled: a cancel was asked of the task, its lease
        was lost, or the worker's shutdown grace ran out."""
        return self._cancelled

    @property
    def cancelled_event(self) -> threading.Event:
        """Set when the run is cancelled: `ctx.cancelled_event.wait(5)`
        sleeps five seconds unless the run is cancelled first."""
        if self._event is None:
            self._event = threading.Event()
            if self._cancelled:
                self._event.set()
        return self._event

    def _cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self._cancelled = True
        if self._event is not None:
            self._event.set()
