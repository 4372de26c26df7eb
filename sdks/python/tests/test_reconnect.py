"""A worker outlives a restart of the server: the Work stream is opened
again (HTTP claims resume) and tasks submitted afterwards are worked."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import rdq
from conftest import TOKEN, Server, start_server, stop_server
from rdq.envelope import Status


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_the_worker_survives_a_server_restart(queue: str, transport: str) -> None:
    data = Path(tempfile.mkdtemp(prefix="rdq-py-restart-"))
    first = start_server(str(data / "store"))
    port = int(first.url.rsplit(":", 1)[1])
    worked: list[str] = []

    async def scenario() -> None:
        nonlocal first
        async with rdq.AsyncClient(first.url, token=TOKEN, transport=transport) as client:  # type: ignore[arg-type]
            worker = rdq.Worker(client, queues=[queue], transport=transport, poll_interval=0.05)  # type: ignore[arg-type]

            @worker.handler("h")
            def h(ctx: rdq.TaskContext) -> None:
                worked.append(ctx.id)

            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                before = (await client.submit(queue, "h")).id
                while before not in worked:
                    await asyncio.sleep(0.02)
                await asyncio.to_thread(stop_server_keeping_data, first)
                first = await asyncio.to_thread(lambda: start_server(str(data / "store"), port=port))
                after = await submit_until_answered(client, queue)
                deadline = time.monotonic() + 60
                while (await client.get(after)).status != Status.SUCCEEDED:
                    assert time.monotonic() < deadline, "the task submitted after the restart was never worked"
                    await asyncio.sleep(0.05)
            finally:
                worker.stop()
                await running

    try:
        asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        stop_server(first)
        shutil.rmtree(data, ignore_errors=True)


async def submit_until_answered(client: rdq.AsyncClient, queue: str) -> str:
    """A call while the connection comes back may fail `Unavailable`, which
    says to try again later."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return (await client.submit(queue, "h")).id
        except rdq.Unavailable:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


def stop_server_keeping_data(server: Server) -> None:
    """Stops the server; its store (outside `server.tmp`) stays for the next."""
    server.proc.terminate()
    server.proc.wait(timeout=30)
    shutil.rmtree(server.tmp, ignore_errors=True)
