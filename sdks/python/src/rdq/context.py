"""`TaskContext`: what a handler knows about the task it runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .envelope import CancelRequest, Envelope


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
        "_load",
        "attempt",
        "cancel_reason",
        "cancel_request",
        "deferral_count",
        "handler_ref",
        "headers",
        "id",
        "lease_token",
        "payload",
        "queue",
        "redrive_count",
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
        self.id = id
        self.lease_token = lease_token
        self.queue = queue
        self.handler_ref = handler_ref
        self.payload = payload
        self.headers = headers
        self.attempt = attempt
        """This attempt's number since submit or the last redrive (1 first)."""
        self.deferral_count = deferral_count
        self.redrive_count = redrive_count
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
