"""Cancelling a running task, against fakes: the worker's plumbing (an
async handler's asyncio task is cancelled, a sync one sees the flag, a
prefetched task is not run, what the handler then does is reported, a
failure as `rdq.Cancelled`), told by a `WorkCancel` on the stream or by a
lease extension's answer on either transport."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

import rdq
from rdq import _http_transport
from rdq._grpc_transport import GrpcTransport, _extension
from rdq._transport import Extension, Settle
from rdq.context import TaskContext
from rdq.envelope import CancelRequest
from rdq.outcome import Kind
from rdq.v1 import api_pb2, envelope_pb2
from rdq.worker import _Slots
from test_work_stream import ScriptedCall, ScriptedStub

TASK_ID = "01J2ZK7Q8XW5H3N9G4T6B8RDQ0"
TOKEN = "1.00000000000000000000000000000000"
OPS = CancelRequest(at="2026-07-20T14:03:30.000Z", by="ops@example.com", message="customer withdrew")


class FakeTransport:
    """Records settles; answers extensions with `extension`."""

    def __init__(self) -> None:
        self.settles: list[Settle] = []
        self.settled = asyncio.Event()
        self.extension = Extension(kept=True)

    async def receive(self) -> None: ...

    def stop_receiving(self) -> None: ...

    def settle(self, s: Settle) -> None:
        self.settles.append(s)
        self.settled.set()

    async def extend(self, task_id: str, lease_token: str, extend_ms: int, stream: int = 0) -> Extension:
        return self.extension

    async def flush(self) -> None: ...

    async def close(self) -> None: ...


def _context(task_id: str = TASK_ID) -> TaskContext:
    return TaskContext(
        id=task_id, lease_token=TOKEN, queue="q", handler_ref="h", payload=b"{}", headers={},
        attempt=1, deferral_count=0, redrive_count=0, load=lambda: None,  # type: ignore[arg-type,return-value]
    )  # fmt: skip


def _scenario(body: Callable[[rdq.Worker, FakeTransport], Awaitable[None]], concurrency: int = 2) -> None:
    async def scenario() -> None:
        async with rdq.AsyncClient("http://127.0.0.1:9", timeout=2) as client:
            worker = rdq.Worker(client, queues=["q"], concurrency=concurrency)
            worker._slots = _Slots(concurrency)
            worker._loop = asyncio.get_running_loop()
            worker._threads = ThreadPoolExecutor(concurrency)
            transport = FakeTransport()
            worker._transport = transport
            try:
                await body(worker, transport)
            finally:
                worker._threads.shutdown(wait=False)

    asyncio.run(asyncio.wait_for(scenario(), 30))


async def _settled(transport: FakeTransport, n: int = 1) -> list[Settle]:
    while len(transport.settles) < n:
        transport.settled.clear()
        await transport.settled.wait()
    return transport.settles


def test_an_async_handler_is_cancelled_and_its_failure_reported_as_cancelled() -> None:
    seen: list[Any] = []

    async def body(worker: rdq.Worker, transport: FakeTransport) -> None:
        started = asyncio.Event()

        @worker.handler("h")
        async def handler(ctx: rdq.TaskContext) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError as err:
                seen.extend([err.args, ctx.cancelled, ctx.cancel_request])
                raise

        worker.accept(_context(), 30000, 0)
        await started.wait()
        worker.request_cancel(TASK_ID, "2.00000000000000000000000000000000", CancelRequest(at=OPS.at, by="other"))
        worker.request_cancel(TASK_ID, TOKEN, OPS)  # the other lease's is not this run's
        (s,) = await _settled(transport)
        assert s.outcome.kind is Kind.PERMANENT_FAILURE and s.outcome.error is not None
        assert (s.outcome.error.type, s.outcome.error.message) == (
            "rdq.Cancelled",
            "cancelled by ops@example.com: customer withdrew",
        )
        assert not s.quiet

    _scenario(body)
    assert seen == [("cancelled by ops@example.com: customer withdrew",), True, OPS]


def test_an_async_handler_that_returns_after_the_cancel_keeps_its_success() -> None:
    async def body(worker: rdq.Worker, transport: FakeTransport) -> None:
        started = asyncio.Event()

        @worker.handler("h")
        async def handler() -> str:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return "finished what mattered"
            return "never"

        worker.accept(_context(), 30000, 0)
        await started.wait()
        worker.request_cancel(TASK_ID, "", OPS)  # no token: any lease of the task
        (s,) = await _settled(transport)
        assert s.outcome.kind is Kind.SUCCESS

    _scenario(body)


@pytest.mark.parametrize("succeed", [False, True])
def test_a_sync_handler_sees_the_flag_only(succeed: bool) -> None:
    seen: list[Any] = []

    async def body(worker: rdq.Worker, transport: FakeTransport) -> None:
        started = threading.Event()

        @worker.handler("h")
        def handler(ctx: rdq.TaskContext) -> None:
            started.set()
            ctx.cancelled_event.wait(20)
            seen.append((ctx.cancelled, ctx.cancel_request, ctx.cancel_reason))
            if not succeed:
                raise RuntimeError("stopped")

        worker.accept(_context(), 30000, 0)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 20)
        worker.request_cancel(TASK_ID, TOKEN, CancelRequest(at=OPS.at, by="ops"))
        (s,) = await _settled(transport)
        if succeed:
            assert s.outcome.kind is Kind.SUCCESS
        else:
            assert s.outcome.error is not None
            assert (s.outcome.kind, s.outcome.error.type, s.outcome.error.message) == (
                Kind.PERMANENT_FAILURE,
                "rdq.Cancelled",
                "cancelled by ops: no reason given",
            )

    _scenario(body)
    assert seen == [(True, CancelRequest(at=OPS.at, by="ops"), "cancelled by ops: no reason given")]


def test_a_prefetched_task_cancelled_before_it_starts_is_not_run() -> None:
    ran: list[str] = []

    async def body(worker: rdq.Worker, transport: FakeTransport) -> None:
        release = asyncio.Event()
        started = asyncio.Event()

        @worker.handler("h")
        async def handler(ctx: rdq.TaskContext) -> None:
            ran.append(ctx.id)
            started.set()
            await release.wait()

        worker.accept(_context("01J2ZK7Q8XW5H3N9G4T6B8RDQ1"), 30000, 0)
        await started.wait()
        worker.accept(_context(), 30000, 0)  # waits for the one slot
        await asyncio.sleep(0.01)
        worker.request_cancel(TASK_ID, TOKEN, OPS)
        (s,) = await _settled(transport)
        assert s.id == TASK_ID and s.outcome.error is not None and s.outcome.error.type == "rdq.Cancelled"
        release.set()
        await _settled(transport, 2)
        await asyncio.sleep(0.01)

    _scenario(body, concurrency=1)
    assert ran == ["01J2ZK7Q8XW5H3N9G4T6B8RDQ1"]


def test_shutdown_is_not_a_cancel_and_a_cancel_does_not_stop_a_shutdown() -> None:
    async def body(worker: rdq.Worker, transport: FakeTransport) -> None:
        started = threading.Event()

        @worker.handler("h")
        def handler(ctx: rdq.TaskContext) -> None:
            started.set()
            threading.Event().wait(0.5)  # ignores the flag

        worker.accept(_context(), 30000, 0)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 20)
        worker.request_cancel(TASK_ID, TOKEN, OPS)
        worker.cancel(worker.running[TASK_ID], "the worker is shutting down", release=True)
        (s,) = await _settled(transport)
        assert s.outcome.kind is Kind.RELEASE

    _scenario(body)


def test_a_lease_extension_answered_with_a_cancel_cancels_the_handler() -> None:
    requests: list[CancelRequest | None] = []

    async def body(worker: rdq.Worker, transport: FakeTransport) -> None:
        started = asyncio.Event()

        @worker.handler("h")
        async def handler(ctx: rdq.TaskContext) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            finally:
                requests.append(ctx.cancel_request)

        worker.accept(_context(), 30000, 0)
        await started.wait()
        r = worker.running[TASK_ID]
        await worker._extend(r)  # a plain extension first
        assert not r.ctx.cancelled
        transport.extension = Extension(kept=True, cancel_requested=True, request=OPS)
        await worker._extend(r)
        (s,) = await _settled(transport)
        assert s.outcome.error is not None and s.outcome.error.type == "rdq.Cancelled"

    _scenario(body)
    assert requests == [OPS]


def test_a_bare_ack_cancels_with_who_asked_read_from_the_task_or_unknown() -> None:
    async def body(worker: rdq.Worker, transport: FakeTransport) -> None:
        started = asyncio.Event()

        @worker.handler("h")
        async def handler() -> None:
            started.set()
            await asyncio.Event().wait()

        worker.accept(_context(), 30000, 0)
        await started.wait()
        transport.extension = Extension(kept=True, cancel_requested=True)
        await worker._extend(worker.running[TASK_ID])  # the task cannot be read: nothing listens
        (s,) = await _settled(transport)
        assert s.outcome.error is not None
        assert (s.outcome.error.type, s.outcome.error.message) == ("rdq.Cancelled", "cancelled")

    _scenario(body)


def _leased() -> api_pb2.WorkResponse:
    return api_pb2.WorkResponse(
        task=api_pb2.LeasedTask(
            id=TASK_ID, lease_token=TOKEN,
            envelope=envelope_pb2.Envelope(
                envelope_version=1, id=TASK_ID, queue="q", handler_ref="h",
                status=envelope_pb2.IN_FLIGHT, created_at="2026-07-20T14:03:22.117Z",
            ),
        )
    )  # fmt: skip


class WaitingCall(ScriptedCall):
    """A scripted stream that waits for the next answer; None ends it."""

    def __init__(self) -> None:
        super().__init__([])
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    async def read(self) -> Any:
        answer = await self.queue.get()
        return grpc.aio.EOF if answer is None else answer  # type: ignore[attr-defined]


def test_a_work_cancel_on_the_stream_reaches_the_running_handler() -> None:
    seen: list[Any] = []

    async def scenario() -> None:
        async with rdq.AsyncClient("http://127.0.0.1:9") as client:
            worker = rdq.Worker(client, queues=["q"])
            worker._slots = _Slots(1)
            worker._loop = asyncio.get_running_loop()
            started = asyncio.Event()

            @worker.handler("h")
            async def handler(ctx: rdq.TaskContext) -> None:
                started.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    seen.append(ctx.cancel_request)
                    raise

            transport = GrpcTransport(worker, worker.capacity)
            worker._transport = transport
            bad_at = envelope_pb2.CancelRequest(at="yesterday", by="cron")  # still cancels, with what it has
            cancel = api_pb2.WorkResponse(cancel=api_pb2.WorkCancel(id=TASK_ID, lease_token=TOKEN, request=bad_at))
            call = WaitingCall()
            transport.stub = ScriptedStub(call)  # type: ignore[assignment]
            reading = asyncio.create_task(transport._stream())
            call.queue.put_nowait(_leased())
            await started.wait()
            call.queue.put_nowait(cancel)
            while not seen:
                await asyncio.sleep(0.01)
            call.queue.put_nowait(None)
            await reading

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert seen == [CancelRequest(at="yesterday", by="cron")]


def test_an_extension_ack_maps_its_cancel_flag_and_request() -> None:
    assert _extension(None) == Extension(kept=True)
    assert _extension(api_pb2.SettleItemResult(id=TASK_ID)) == Extension(kept=True)
    assert _extension(api_pb2.SettleItemResult(id=TASK_ID, cancel_requested=True)) == Extension(
        kept=True, cancel_requested=True
    )
    env = envelope_pb2.Envelope(
        cancel_requested=envelope_pb2.CancelRequest(at=OPS.at, by=OPS.by, message=OPS.message or "")
    )
    assert _extension(api_pb2.SettleItemResult(id=TASK_ID, envelope=env, cancel_requested=True)) == Extension(
        kept=True, cancel_requested=True, request=OPS
    )


def test_an_http_extension_reads_the_envelopes_cancel_request() -> None:
    fixture = Path(__file__).resolve().parents[3] / "compliance/fixtures/valid/cancel_requested_running.json"
    running = rdq.envelope.decode(fixture.read_bytes())

    class Answering:
        def __init__(self, answer: object) -> None:
            self.answer = answer

        async def _run(self, call: object) -> object:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    async def scenario() -> None:
        got = await _http_transport.extend_over_http(Answering(running), TASK_ID, TOKEN, 1000)  # type: ignore[arg-type]
        assert got == Extension(kept=True, cancel_requested=True, request=running.cancel_requested)
        running.cancel_requested = None
        assert await _http_transport.extend_over_http(Answering(running), TASK_ID, TOKEN, 1000) == Extension(True)  # type: ignore[arg-type]
        lost = rdq.LeaseLost("LEASE_LOST", "gone", status=409)
        assert await _http_transport.extend_over_http(Answering(lost), TASK_ID, TOKEN, 1000) == Extension(False)  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_cancel_sends_pending_only_and_reads_running() -> None:
    import httpx

    from rdq import _calls

    call = _calls.cancel("q", ["A"], None, None, None, None, False, "why", pending_only=True)
    assert (call.method, call.path) == ("POST", "/v1/queues/q/cancel")
    assert call.body == {"dry_run": False, "ids": ["A"], "message": "why", "pending_only": True}
    assert "pending_only" not in _calls.cancel("q", None, None, None, None, None, True, None).body  # type: ignore[operator]
    answer = {"queue": "q", "dry_run": False, "count": 2, "ids": ["A", "B"], "running": ["B"]}
    assert call.read(httpx.Response(200, json=answer)) == rdq.CancelResult("q", False, 2, ["A", "B"], ["B"])
    older = {"queue": "q", "dry_run": False, "count": 1, "ids": ["A"]}  # a server that predates `running`
    assert call.read(httpx.Response(200, json=older)).running == []
