"""The worker on the gRPC `Work` stream (docs/grpc.md, "The Work stream").

One bidirectional stream carries everything: a hello with the worker's
credits (its concurrency), tasks in, settles out in batches (everything
queued when the writer wakes goes in one `WorkSettle`), lease extensions
out, acknowledgements in, matched by `seq`. A broken stream is opened again
with backoff; settles whose acknowledgement was lost are sent again (a
repeat is refused with LEASE_LOST and changes nothing), and tasks of an
earlier stream give their credit back with a `WorkCredit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from . import _calls
from ._grpc import rpc_error
from ._http_transport import extend_over_http
from ._proto import cancel_request_from_proto, envelope_from_proto
from ._transport import Extension, Settle, lease_duration_ms
from .context import TaskContext
from .envelope import CancelRequest
from .errors import RdqError, error_for
from .outcome import Kind
from .v1 import api_pb2, api_pb2_grpc, envelope_pb2

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("rdq.worker")

SETTLE_LINGER = 0.002
"""How long a settle waits for others to share its message, at most."""

_REPORTED = {
    Kind.SUCCESS: api_pb2.REPORTED_SUCCESS,
    Kind.RETRYABLE_FAILURE: api_pb2.REPORTED_RETRYABLE_FAILURE,
    Kind.PERMANENT_FAILURE: api_pb2.REPORTED_PERMANENT_FAILURE,
    Kind.FAILURE: api_pb2.REPORTED_FAILURE,
    Kind.DEFER: api_pb2.REPORTED_DEFER,
    Kind.RELEASE: api_pb2.REPORTED_RELEASE,
}
_THROTTLE = {"key": api_pb2.DEFER_THROTTLE_KEY, "queue": api_pb2.DEFER_THROTTLE_QUEUE}
# Refusals of a hello that a new stream would only repeat.
_FATAL = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
}


class GrpcUnsupported(Exception):
    """The first Work stream was answered UNIMPLEMENTED: the server, or a
    proxy in front of it (gRPC maps an HTTP 404 so), has no gRPC API. The
    worker goes on over HTTP."""


@dataclass
class _Extend:
    id: str
    lease_token: str
    extend_ms: int
    answer: asyncio.Future[Extension]


class GrpcTransport:
    """One Work stream holding `capacity` of the worker's credits; `index`
    is its place among the worker's streams."""

    def __init__(self, worker: Worker, capacity: int, index: int = 0) -> None:
        self.worker = worker
        self.capacity = capacity
        self.index = index
        settings = worker.client.settings
        self.channel = worker.client.grpc_channel()
        self.stub = api_pb2_grpc.WorkersStub(self.channel)  # type: ignore[no-untyped-call]
        self.metadata = (("authorization", f"Bearer {settings.token}"),) if settings.token else ()
        # What the writer sends next; None half-closes the stream. A deque
        # and an event rather than an asyncio.Queue: a settle a task.
        self.outbox: deque[Settle | _Extend | None] = deque()
        self.queued = asyncio.Event()
        self.pending: dict[int, list[Settle] | _Extend] = {}
        self.seq = 0
        self.generation = 0
        self.want_envelopes = worker.on_dead_letter is not None
        self.http_settles: list[Settle] = []
        self.batch_target = max(1, min(64, capacity // 4))
        self.chunk = max(1, capacity // 2)
        self.enough = asyncio.Event()
        self.http_flusher: asyncio.Task[None] | None = None
        self.received = False
        self.last_lease: tuple[tuple[str | None, str | None], int] = ((None, None), 30000)

    async def receive(self) -> None:
        backoff = 0.1
        while True:
            try:
                await self._stream()
                backoff = 0.1
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.UNIMPLEMENTED and not self.received:
                    raise GrpcUnsupported(err.details()) from None
                if err.code() in _FATAL:
                    raise rpc_error(err) from None
                if not self.worker.stopping:
                    log.warning("rdq worker: the Work stream broke: %s: %s", err.code().name, err.details())
            self._requeue()
            if self.worker.stopping:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def stop_receiving(self) -> None:
        """Half-closes the stream once what is queued is written: the server
        then hands out nothing more, and the tasks it already sent are read
        to the end of the stream (and handed back)."""
        self._queue(None)

    def _queue(self, entry: Settle | _Extend | None) -> None:
        self.outbox.append(entry)
        self.queued.set()

    def _requeue(self) -> None:
        """What a broken stream left unanswered: settles go again, quietly;
        extensions are answered with an error, so the heartbeat retries."""
        for entry in self.pending.values():
            if isinstance(entry, _Extend):
                if not entry.answer.done():
                    entry.answer.set_exception(ConnectionError("the Work stream broke"))
            else:
                for s in entry:
                    self._queue(dataclasses.replace(s, quiet=True))
        self.pending.clear()

    async def _stream(self) -> None:
        self.generation += 1
        generation = self.generation
        w = self.worker
        call = self.stub.Work(metadata=self.metadata)
        # Tasks still running from an earlier opening keep their credits.
        held = sum(1 for r in w.running.values() if r.stream == self.index)
        hello = api_pb2.WorkHello(
            queues=w.queues,
            credits=max(1, self.capacity - held),
            bare_acks=not self.want_envelopes,
            # A claim's tasks in one message: each read from the stream is
            # an event-loop round trip of its own.
            task_batches=True,
        )
        if w.lease_ms is not None:
            hello.lease_ms = w.lease_ms
        await call.write(api_pb2.WorkRequest(hello=hello))
        writer = asyncio.create_task(self._write(call, generation))
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:  # type: ignore[attr-defined]
                    if writer.done():
                        writer.result()
                    return
                self.received = True
                kind = resp.WhichOneof("kind")
                if kind == "tasks":
                    for i, t in enumerate(resp.tasks.tasks, 1):
                        self._task(t, generation)
                        if i % self.chunk == 0:
                            # Let these run and their settles go out before
                            # the rest start: the server refills while the
                            # worker is still busy, rather than after.
                            await asyncio.sleep(0)
                    continue
                try:
                    if kind == "task":
                        self._task(resp.task, generation)
                    elif kind == "ack":
                        self._ack(resp.ack)
                    elif kind == "cancel":
                        c = resp.cancel
                        self.worker.request_cancel(c.id, c.lease_token, _cancel_request(c.request))
                except Exception:
                    log.exception("rdq worker: a %s message from the server could not be handled", kind)
                # Any other kind comes from a newer server: skipped.
        finally:
            writer.cancel()
            call.cancel()

    def _task(self, t: api_pb2.LeasedTask, generation: int) -> None:
        try:
            self._accept(t, generation)
        except Exception:
            log.exception("rdq worker: task %s from the server could not be taken", t.id)

    def _accept(self, t: api_pb2.LeasedTask, generation: int) -> None:
        env = t.envelope
        w = self.worker
        lease_ms = w.lease_ms
        if lease_ms is None:
            started = env.attempts[-1].started_at if env.attempts else None
            expires = env.lease_expires_at if env.HasField("lease_expires_at") else None
            # The tasks of one claim share their times: read them once.
            key = (expires, started)
            if key != self.last_lease[0]:
                self.last_lease = (key, lease_duration_ms(expires, started, 30000))
            lease_ms = self.last_lease[1]
        ctx = TaskContext._of_message(t.id, t.lease_token, env, functools.partial(envelope_from_proto, env))
        w.accept(ctx, lease_ms, generation, self.index)

    def _ack(self, ack: api_pb2.WorkAck) -> None:
        entry = self.pending.pop(ack.seq, None)
        if entry is None:
            return
        if isinstance(entry, _Extend):
            if entry.answer.done():
                return
            if not ack.results or not ack.results[0].HasField("problem"):
                entry.answer.set_result(_extension(ack.results[0] if ack.results else None))
                return
            problem = ack.results[0].problem
            if problem.code in ("LEASE_LOST", "TASK_NOT_FOUND"):
                entry.answer.set_result(Extension(kept=False))
            else:
                entry.answer.set_exception(error_for(problem.http_status, problem.code, problem.detail))
            return
        if not self.want_envelopes and not any(r.HasField("problem") for r in ack.results):
            return  # every settle taken, and nothing to read from the answers
        for s, result in zip(entry, ack.results, strict=False):
            if result.HasField("problem"):
                self.worker.settled(s, None, result.problem.code, result.problem.detail)
            else:
                env = (
                    envelope_from_proto(result.envelope)
                    if self.want_envelopes and result.HasField("envelope")
                    else None
                )
                self.worker.settled(s, env, None, None)

    async def _write(
        self, call: grpc.aio.StreamStreamCall[api_pb2.WorkRequest, api_pb2.WorkResponse], generation: int
    ) -> None:
        outbox = self.outbox
        while True:
            while not outbox:
                self.queued.clear()
                await self.queued.wait()
            if isinstance(outbox[0], Settle) and len(outbox) < self.batch_target:
                # Linger for a batch: a message on the stream costs far more
                # than a settle in it, and the server hands out tasks once a
                # quarter of the credits is free anyway.
                self.enough.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.enough.wait(), SETTLE_LINGER)
            first = outbox.popleft()
            if first is None:
                await call.done_writing()
                return
            batch: list[Settle | _Extend] = [first]
            while len(batch) < 1000 and outbox:
                following = outbox.popleft()
                if following is None:
                    outbox.appendleft(None)
                    break
                batch.append(following)
            settles = [b for b in batch if isinstance(b, Settle)]
            if settles:
                self.seq += 1
                self.pending[self.seq] = settles
                message = api_pb2.WorkRequest()
                message.settle.seq = self.seq
                items = message.settle.settles
                for s in settles:
                    _settle_request(s, items.add())
                await call.write(message)
                earlier = sum(1 for s in settles if s.generation != generation)
                if earlier:
                    await call.write(api_pb2.WorkRequest(credit=api_pb2.WorkCredit(credits=earlier)))
            for e in batch:
                if isinstance(e, _Extend):
                    self.seq += 1
                    self.pending[self.seq] = e
                    request = api_pb2.ExtendLeaseRequest(id=e.id, lease_token=e.lease_token, extend_ms=e.extend_ms)
                    await call.write(api_pb2.WorkRequest(extend=api_pb2.WorkExtend(seq=self.seq, extend=request)))

    def settle(self, s: Settle) -> None:
        if not self.worker.stopping:
            self._queue(s)
            if len(self.outbox) >= self.batch_target:
                self.enough.set()
            return
        # A settle on the stream gives its credit back and the server hands
        # out the next task; once stopping, settles go over HTTP so the
        # stream runs dry instead of cycling released tasks.
        self.http_settles.append(s)
        if self.http_flusher is None or self.http_flusher.done():
            self.http_flusher = asyncio.create_task(self._settle_over_http())

    async def _settle_over_http(self) -> None:
        failures = 0
        while self.http_settles:
            batch, self.http_settles = self.http_settles[:1000], self.http_settles[1000:]
            try:
                results = await self.worker.client._run(
                    _calls.settle_batch([s.to_json() for s in batch], self.want_envelopes)
                )
            except RdqError as err:
                failures += 1
                log.warning("rdq worker: settling %d tasks failed: %s", len(batch), err)
                if failures < 5:
                    self.http_settles[:0] = [Settle(s.id, s.lease_token, s.outcome, quiet=True) for s in batch]
                    await asyncio.sleep(0.2 * failures)
                continue
            for s, r in zip(batch, results, strict=False):
                self.worker.settled(s, r.envelope, r.code, r.detail)

    async def extend(self, task_id: str, lease_token: str, extend_ms: int, stream: int = 0) -> Extension:
        if self.worker.stopping:
            return await extend_over_http(self.worker.client, task_id, lease_token, extend_ms)
        answer: asyncio.Future[Extension] = asyncio.get_running_loop().create_future()
        self._queue(_Extend(task_id, lease_token, extend_ms, answer))
        return await asyncio.wait_for(answer, timeout=max(5.0, extend_ms / 2000))

    async def flush(self) -> None:
        for _ in range(1000):
            on_stream = any(isinstance(p, list) for p in self.pending.values())
            over_http = self.http_flusher is not None and not self.http_flusher.done()
            if not on_stream and not over_http:
                return
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        """The channel is the client's, closed with it."""


class GrpcStreams:
    """The worker's `streams` Work streams on the client's channel, sharing
    its credits (the first ones one more when they do not divide evenly).
    The server serves one stream's claims one after another, each stream
    beside the others; settles and extensions go on the stream their task
    came on (a settle there gives the credit back)."""

    def __init__(self, worker: Worker, streams: int) -> None:
        cap = worker.capacity
        n = min(streams, cap)
        self.parts = [GrpcTransport(worker, cap // n + (1 if i < cap % n else 0), i) for i in range(n)]

    async def receive(self) -> None:
        """Runs every stream; the first that fails for good (a bad hello, no
        gRPC) stops the others and raises."""
        tasks = [asyncio.create_task(p.receive()) for p in self.parts]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def stop_receiving(self) -> None:
        for p in self.parts:
            p.stop_receiving()

    def settle(self, s: Settle) -> None:
        self.parts[s.stream].settle(s)

    async def extend(self, task_id: str, lease_token: str, extend_ms: int, stream: int = 0) -> Extension:
        return await self.parts[stream].extend(task_id, lease_token, extend_ms)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.parts))

    async def close(self) -> None:
        """The channel is the client's, closed with it."""


def _extension(result: api_pb2.SettleItemResult | None) -> Extension:
    """A kept lease's answer: `cancel_requested` is set in bare acks too; the
    envelope, when the ack carries one, says who asked."""
    if result is None:
        return Extension(kept=True)
    request = None
    if result.HasField("envelope") and result.envelope.HasField("cancel_requested"):
        request = _cancel_request(result.envelope.cancel_requested)
    return Extension(kept=True, cancel_requested=result.cancel_requested or request is not None, request=request)


def _cancel_request(r: envelope_pb2.CancelRequest) -> CancelRequest:
    """A message's cancel request; one that does not map onto a valid one
    still cancels, with what it has."""
    try:
        return cancel_request_from_proto(r)
    except ValueError:
        return CancelRequest(at=r.at, by=r.by, message=r.message if r.HasField("message") else None)


def _settle_request(s: Settle, req: api_pb2.SettleRequest) -> None:
    """Writes `s` into `req` (an item added to a `WorkSettle`, so that it is
    not built apart and copied in)."""
    o = s.outcome
    req.id = s.id
    req.lease_token = s.lease_token
    req.outcome = _REPORTED[o.kind]
    if o.error is not None:
        e = o.error.to_json()
        err = api_pb2.ReportedError(type=o.error.type, message=str(e["message"]))
        if o.error.detail is not None:
            err.detail_json = o.error.detail_json() or "null"
        if "stack" in e:
            err.stack = str(e["stack"])
        req.error.CopyFrom(err)
    if o.kind is Kind.DEFER:
        req.defer_ms = o.defer_ms or 0
        if o.throttle is not None:
            req.throttle = _THROTTLE[o.throttle]
