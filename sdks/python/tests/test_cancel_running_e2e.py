"""Cancelling a running task against a real server, on the Work stream and
over HTTP: the handler learns of it (an async one through its asyncio
task, a sync one through the flag), and the task ends DEAD with reason
CANCELLED by whoever asked, or SUCCEEDED when the handler returns all the
same. Skipped on a server that cannot cancel running tasks (501)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import rdq
from conftest import Server
from rdq import _grpc_transport
from rdq.envelope import CancelRequest, Envelope, Status
from rdq.v1 import envelope_pb2

TRANSPORTS = ["grpc", "http"]
BY = "py"  # the name of the test server's token


async def _scenario(
    server: Server, queue: str, transport: str, handler: str, register: Any, started: threading.Event
) -> tuple[Envelope, rdq.CancelResult]:
    async with server.async_client() as client:
        # A short lease: over HTTP the cancel arrives with an extension.
        await client.set_queue_config(queue, {"lease_ms": 1500})
        task = await client.submit(queue, handler)
        worker = rdq.Worker(client, queues=[queue], transport=transport)  # type: ignore[arg-type]
        register(worker)
        running = asyncio.create_task(worker.run(handle_signals=False))
        try:
            assert await asyncio.to_thread(started.wait, 60), "the handler never started"
            try:
                result = await client.cancel(queue, ids=[task.id], message="customer withdrew")
            except rdq.Unsupported:
                pytest.skip("this server cannot cancel running tasks")
            deadline = time.monotonic() + 60
            while True:
                env = await client.get(task.id)
                if env.status in (Status.SUCCEEDED, Status.DEAD):
                    return env, result
                assert time.monotonic() < deadline, rdq.envelope.encode(env)
                await asyncio.sleep(0.02)
        finally:
            worker.stop()
            await running


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("handler", ["async", "sync"])
def test_a_cancelled_running_task_stops_its_handler_and_ends_dead(
    server: Server, queue: str, transport: str, handler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()
    seen: list[Any] = []
    # The stream's WorkCancel messages (bare acks carry no request to map).
    heard: list[str] = []
    mapped = _grpc_transport._cancel_request

    def mapping(r: envelope_pb2.CancelRequest) -> CancelRequest:
        heard.append(r.by)
        return mapped(r)

    monkeypatch.setattr(_grpc_transport, "_cancel_request", mapping)

    def register(w: rdq.Worker) -> None:
        @w.handler("async")
        async def waits(ctx: rdq.TaskContext) -> None:
            started.set()
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError as err:
                seen.append((err.args, ctx.cancel_request))
                raise

        @w.handler("sync")
        def waits_sync(ctx: rdq.TaskContext) -> None:
            started.set()
            ctx.cancelled_event.wait(120)
            seen.append((ctx.cancel_reason, ctx.cancel_request))
            raise RuntimeError("stopped")

    env, result = asyncio.run(_scenario(server, queue, transport, handler, register, started))
    assert result.ids == [env.id] and result.running == [env.id] and result.count == 1
    assert len(seen) == 1
    assert heard == ([BY] if transport == "grpc" else [])  # over HTTP: a lease extension's answer
    why, request = seen[0]
    assert request is not None and (request.by, request.message) == (BY, "customer withdrew")
    assert why in (("cancelled by py: customer withdrew",), "cancelled by py: customer withdrew")
    assert env.status == Status.DEAD
    assert env.dead_reason is not None and env.dead_reason.code == rdq.DeadReasonCode.CANCELLED
    assert env.dead_reason.by == BY
    assert env.cancel_requested is not None and env.cancel_requested.by == BY
    error = env.attempts[-1].error
    assert error is not None and (error.type, error.message) == ("rdq.Cancelled", "cancelled by py: customer withdrew")
    assert env.attempt_count == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_handler_that_returns_after_the_cancel_leaves_the_task_succeeded(
    server: Server, queue: str, transport: str
) -> None:
    started = threading.Event()

    def register(w: rdq.Worker) -> None:
        @w.handler("finishes")
        async def finishes(ctx: rdq.TaskContext) -> str:
            started.set()
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                return "done all the same"
            return "never"

    env, result = asyncio.run(_scenario(server, queue, transport, "finishes", register, started))
    assert result.running == [env.id]
    assert env.status == Status.SUCCEEDED and env.dead_reason is None
    assert env.cancel_requested is not None and env.cancel_requested.by == BY


def test_pending_only_leaves_running_tasks_alone(server: Server, queue: str) -> None:
    started = threading.Event()
    release = threading.Event()

    async def scenario() -> None:
        async with server.async_client() as client:
            running_task = await client.submit(queue, "holds")
            worker = rdq.Worker(client, queues=[queue], concurrency=1)

            @worker.handler("holds")
            def holds() -> None:
                started.set()
                release.wait(60)

            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                assert await asyncio.to_thread(started.wait, 60)
                pending_task = await client.submit(queue, "holds")
                try:
                    result = await client.cancel(queue, pending_only=True)
                except rdq.Unsupported:
                    pytest.skip("this server cannot cancel running tasks")
                assert (result.ids, result.running) == ([pending_task.id], [])
                release.set()
                deadline = time.monotonic() + 60
                while (await client.get(running_task.id)).status != Status.SUCCEEDED:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
            finally:
                release.set()
                worker.stop()
                await running

    asyncio.run(scenario())
