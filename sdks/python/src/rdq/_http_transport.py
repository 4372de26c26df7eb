"""The worker over plain HTTP, the fallback where gRPC cannot pass:
claims of up to the free slots, queues taken in turn, a short sleep when
every queue is empty; settles sent in batches of up to 1000 by one flusher."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING

from . import _calls
from ._transport import Extension, Settle, lease_duration_ms
from .context import TaskContext
from .envelope import Envelope
from .errors import LeaseLost, NotFound, RdqError

if TYPE_CHECKING:
    from .client import AsyncClient
    from .worker import Worker

log = logging.getLogger("rdq.worker")


def _same(env: Envelope) -> Envelope:
    return env


class HttpTransport:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.client = worker.client
        self.buffer: list[Settle] = []
        self.wake = asyncio.Event()
        self.sending = 0
        self.flusher: asyncio.Task[None] | None = None

    async def receive(self) -> None:
        w = self.worker
        self.flusher = asyncio.create_task(self._flush_loop())
        turn = 0
        empty_in_a_row = 0
        while not w.stopping:
            free = w.free_slots
            if free <= 0:
                assert w.slot_freed is not None
                w.slot_freed.clear()
                await w.slot_freed.wait()
                continue
            queue = w.queues[turn % len(w.queues)]
            turn += 1
            try:
                tasks = await self.client._run(_calls.claim(queue, min(free, 1000), w.lease_ms))
            except RdqError as err:
                if err.status in (400, 401, 403, 404) and err.code != "QUEUE_NOT_FOUND":
                    raise
                log.warning("rdq worker: claiming from %s failed: %s", queue, err)
                await asyncio.sleep(w.poll_interval)
                continue
            for t in tasks:
                env = t.envelope
                started = env.attempts[-1].started_at if env.attempts else None
                lease_ms = w.lease_ms or lease_duration_ms(env.lease_expires_at, started, 30000)
                ctx = TaskContext(
                    id=t.id,
                    lease_token=t.lease_token,
                    queue=env.queue,
                    handler_ref=env.handler_ref,
                    payload=env.payload,
                    headers=env.headers,
                    attempt=env.attempt_count,
                    deferral_count=env.deferral_count,
                    redrive_count=env.redrive_count,
                    load=functools.partial(_same, env),
                )
                w.accept(ctx, lease_ms, 0)
            if tasks:
                empty_in_a_row = 0
            else:
                empty_in_a_row += 1
                if empty_in_a_row >= len(w.queues):
                    empty_in_a_row = 0
                    await asyncio.sleep(w.poll_interval)

    def stop_receiving(self) -> None:
        """Claims stop by themselves once the worker is stopping."""

    def settle(self, s: Settle) -> None:
        self.buffer.append(s)
        self.wake.set()

    async def _flush_loop(self) -> None:
        want = self.worker.on_dead_letter is not None
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.buffer:
                batch, self.buffer = self.buffer[:1000], self.buffer[1000:]
                self.sending += 1
                try:
                    results = await self.client._run(_calls.settle_batch([s.to_json() for s in batch], want))
                except RdqError as err:
                    log.warning("rdq worker: settling %d tasks failed: %s; trying again", len(batch), err)
                    self.buffer[:0] = [Settle(s.id, s.lease_token, s.outcome, quiet=True) for s in batch]
                    await asyncio.sleep(0.5)
                    continue
                finally:
                    self.sending -= 1
                for s, r in zip(batch, results, strict=False):
                    self.worker.settled(s, r.envelope, r.code, r.detail)

    async def extend(self, task_id: str, lease_token: str, extend_ms: int, stream: int = 0) -> Extension:
        return await extend_over_http(self.client, task_id, lease_token, extend_ms)

    async def flush(self) -> None:
        for _ in range(1000):
            if not self.buffer and not self.sending:
                return
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        if self.flusher is not None:
            self.flusher.cancel()


async def extend_over_http(client: AsyncClient, task_id: str, lease_token: str, extend_ms: int) -> Extension:
    """`POST /v1/tasks/{id}/lease`: the answer is the task's envelope, whose
    `cancel_requested` says whether a cancel was asked of it."""
    try:
        env = await client._run(_calls.extend_lease(task_id, lease_token, extend_ms))
    except (LeaseLost, NotFound):
        return Extension(kept=False)
    request = env.cancel_requested
    return Extension(kept=True, cancel_requested=request is not None, request=request)
