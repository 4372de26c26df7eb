"""The Work stream's reader against a scripted stream (messages of a kind
this SDK does not know, a newer server's, are ignored and the stream goes
on; a batch of tasks is taken whole) and the worker's streams against a
real server."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest

import rdq
from conftest import Server
from rdq._grpc_transport import GrpcTransport
from rdq.envelope import Status
from rdq.v1 import api_pb2, api_pb2_grpc, envelope_pb2
from rdq.worker import _Slots

# Field 15 of WorkResponse, length-delimited and empty: a kind added later.
UNKNOWN_KIND = b"\x7a\x00"


class ScriptedCall:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.written: list[api_pb2.WorkRequest] = []

    async def write(self, request: api_pb2.WorkRequest) -> None:
        self.written.append(request)

    async def read(self) -> Any:
        await asyncio.sleep(0)
        return self.answers.pop(0) if self.answers else grpc.aio.EOF  # type: ignore[attr-defined]

    async def done_writing(self) -> None:
        pass

    def cancel(self) -> None:
        pass


class ScriptedStub:
    def __init__(self, call: ScriptedCall) -> None:
        self.call = call

    def Work(self, metadata: object = None) -> ScriptedCall:
        return self.call


def test_a_message_of_an_unknown_kind_is_ignored() -> None:
    seen: list[str] = []

    async def scenario() -> None:
        async with rdq.AsyncClient("http://127.0.0.1:9") as client:
            worker = rdq.Worker(client, queues=["q"])
            worker.handler("h")(lambda ctx: seen.append(ctx.id))
            worker._slots = _Slots(1)
            worker._loop = asyncio.get_running_loop()
            transport = GrpcTransport(worker, worker.capacity)
            worker._transport = transport
            task = api_pb2.WorkResponse(
                task=api_pb2.LeasedTask(
                    id="01J2ZK7Q8XW5H3N9G4T6B8RDQ0",
                    lease_token="1.00000000000000000000000000000000",
                    envelope=envelope_pb2.Envelope(
                        envelope_version=1, id="01J2ZK7Q8XW5H3N9G4T6B8RDQ0", queue="q", handler_ref="h",
                        status=envelope_pb2.IN_FLIGHT, created_at="2026-07-20T14:03:22.117Z",
                    ),
                )
            )  # fmt: skip
            call = ScriptedCall([api_pb2.WorkResponse.FromString(UNKNOWN_KIND), task])
            transport.stub = ScriptedStub(call)  # type: ignore[assignment]
            await transport._stream()
            while not seen:
                await asyncio.sleep(0.01)
            assert call.written[0].WhichOneof("kind") == "hello"

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert seen == ["01J2ZK7Q8XW5H3N9G4T6B8RDQ0"]


def _leased(i: int) -> api_pb2.LeasedTask:
    task_id = f"01J2ZK7Q8XW5H3N9G4T6B8RD{i:02d}"
    return api_pb2.LeasedTask(
        id=task_id,
        lease_token=f"1.{i:032d}",
        envelope=envelope_pb2.Envelope(
            envelope_version=1, id=task_id, queue="q", handler_ref="h", payload=b"%d" % i,
            status=envelope_pb2.IN_FLIGHT, created_at="2026-07-20T14:03:22.117Z",
        ),
    )  # fmt: skip


def test_a_batch_of_tasks_is_taken_whole_and_the_hello_asks_for_batches() -> None:
    seen: list[tuple[str, bytes]] = []

    async def scenario() -> None:
        async with rdq.AsyncClient("http://127.0.0.1:9") as client:
            worker = rdq.Worker(client, queues=["q"], concurrency=4, prefetch=4)
            worker.handler("h")(lambda ctx: seen.append((ctx.id, ctx.payload)))
            worker._loop = asyncio.get_running_loop()
            transport = GrpcTransport(worker, worker.capacity)
            worker._transport = transport
            batch = api_pb2.WorkResponse(tasks=api_pb2.ClaimResponse(tasks=[_leased(i) for i in range(7)]))
            call = ScriptedCall([batch, api_pb2.WorkResponse(task=_leased(7))])
            transport.stub = ScriptedStub(call)  # type: ignore[assignment]
            await transport._stream()
            while len(seen) < 8:
                await asyncio.sleep(0.01)
            hello = call.written[0].hello
            assert hello.task_batches and hello.credits == 8

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert sorted(seen) == sorted((f"01J2ZK7Q8XW5H3N9G4T6B8RD{i:02d}", b"%d" % i) for i in range(8))


def test_streams_share_the_credits_and_settle_on_their_own_stream(server: Server, queue: str) -> None:
    ran: list[str] = []

    async def scenario() -> None:
        async with server.async_client() as client:
            results = await client.submit_batch([rdq.Submit(queue, "h", i) for i in range(60)])
            ids = [r.envelope.id for r in results if r.envelope is not None]
            assert len(ids) == 60
            # One credit a stream: a settle sent on the wrong stream would
            # give no credit back to the stream that ran the task, and it
            # would stall.
            worker = rdq.Worker(client, queues=[queue], concurrency=3, streams=3)
            worker.handler("h")(lambda ctx: ran.append(ctx.id))
            running = asyncio.create_task(worker.run(handle_signals=False))
            while len(ran) < 60 or (await client.queues([queue]))[0].succeeded != 60:
                await asyncio.sleep(0.02)
            parts = worker._transport.parts  # type: ignore[union-attr]
            assert [p.capacity for p in parts] == [1, 1, 1]
            assert all(p.received for p in parts), "every stream was handed tasks"
            worker.stop()
            await running
            assert sorted(ran) == sorted(ids), "each task ran once"

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_streams_are_checked_and_credits_split_unevenly() -> None:
    async def scenario() -> None:
        async with rdq.AsyncClient("http://127.0.0.1:9") as client:
            for bad in (0, 65):
                with pytest.raises(ValueError, match="streams"):
                    rdq.Worker(client, queues=["q"], streams=bad)
            from rdq._grpc_transport import GrpcStreams

            worker = rdq.Worker(client, queues=["q"], concurrency=4, prefetch=3, streams=3)
            assert [p.capacity for p in GrpcStreams(worker, worker.streams).parts] == [3, 2, 2]
            few = rdq.Worker(client, queues=["q"], concurrency=2, streams=5)
            assert [p.capacity for p in GrpcStreams(few, few.streams).parts] == [1, 1]

    asyncio.run(scenario())


class Unimplemented:
    def Work(self, metadata: object = None) -> Any:
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(), "404", None)


def test_a_server_without_the_work_stream_is_worked_over_http(
    server: Server, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_pb2_grpc, "WorkersStub", lambda channel: Unimplemented())

    async def scenario() -> None:
        async with server.async_client() as client:
            task = await client.submit(queue, "h")
            worker = rdq.Worker(client, queues=[queue], transport="grpc", streams=2)
            worker.handler("h")(lambda: None)
            running = asyncio.create_task(worker.run(handle_signals=False))
            while (await client.get(task.id)).status != Status.SUCCEEDED:
                await asyncio.sleep(0.02)
            assert type(worker._transport).__name__ == "HttpTransport"
            worker.stop()
            await running

    asyncio.run(asyncio.wait_for(scenario(), 60))
