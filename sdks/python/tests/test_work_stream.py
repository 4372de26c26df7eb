"""The Work stream's reader against a scripted stream: messages of a kind
this SDK does not know (a newer server's) are ignored, and the stream goes
on."""

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
            worker._slots = asyncio.Semaphore(1)
            worker._loop = asyncio.get_running_loop()
            transport = GrpcTransport(worker)
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
            worker = rdq.Worker(client, queues=[queue], transport="grpc")
            worker.handler("h")(lambda: None)
            running = asyncio.create_task(worker.run(handle_signals=False))
            while (await client.get(task.id)).status != Status.SUCCEEDED:
                await asyncio.sleep(0.02)
            assert type(worker._transport).__name__ == "HttpTransport"
            worker.stop()
            await running

    asyncio.run(asyncio.wait_for(scenario(), 60))
