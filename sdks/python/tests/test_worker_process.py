"""A worker process killed with SIGKILL or stopped with SIGTERM mid-task:
what becomes of its task."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import rdq
from conftest import TOKEN, Server, wait_for
from rdq.envelope import Outcome, Status

TRANSPORTS = ["grpc", "http"]
SCRIPT = Path(__file__).with_name("worker_process.py")


def start_worker(server: Server, queue: str, transport: str, grace: float = 30.0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), server.url, TOKEN, queue, transport, str(grace)],
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_started(proc: subprocess.Popen[str], task_id: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.split() == ["started", task_id], line


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_task_of_a_killed_worker_comes_back_through_lease_expiry(server: Server, queue: str, transport: str) -> None:
    with server.client() as client:
        client.set_queue_config(queue, {"lease_ms": 1000, "backoff": {"kind": "none"}})
        task = client.submit(queue, "hang")
        proc = start_worker(server, queue, transport)
        try:
            wait_started(proc, task.id)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(30)
        back = wait_for(client, task.id, lambda e: e.status == Status.PENDING and e.attempts, "PENDING again")
        assert back.attempts[0].outcome == Outcome.LEASE_EXPIRED
        assert back.attempts[0].error is not None and back.attempts[0].error.type == "rdq.LeaseExpired"

        async def succeed_it() -> None:
            async with server.async_client() as aclient:
                worker = rdq.Worker(aclient, queues=[queue], transport=transport)  # type: ignore[arg-type]
                worker.handler("hang")(lambda: None)
                running = asyncio.create_task(worker.run(handle_signals=False))
                await asyncio.to_thread(wait_for, client, task.id, lambda e: e.status == Status.SUCCEEDED, "done")
                worker.stop()
                await running

        asyncio.run(succeed_it())
        done = client.get(task.id)
        assert [a.outcome for a in done.attempts] == [Outcome.LEASE_EXPIRED, Outcome.SUCCESS]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sigterm_lets_the_running_task_finish(server: Server, queue: str, transport: str) -> None:
    with server.client() as client:
        task = client.submit(queue, "slow")
        proc = start_worker(server, queue, transport)
        wait_started(proc, task.id)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert (proc.returncode, out.split()) == (0, ["stopped"])
        done = client.get(task.id)
        assert done.status == Status.SUCCEEDED
        assert [a.outcome for a in done.attempts] == [Outcome.SUCCESS]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sigterm_hands_back_what_does_not_finish_within_the_grace(server: Server, queue: str, transport: str) -> None:
    with server.client() as client:
        task = client.submit(queue, "hang")
        proc = start_worker(server, queue, transport, grace=0.2)
        wait_started(proc, task.id)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert (proc.returncode, out.split()) == (0, ["stopped"])
        back = client.get(task.id)
        assert (back.status, back.attempt_count, back.claim_count) == (Status.PENDING, 0, 1)
        assert all(a.outcome != Outcome.LEASE_EXPIRED for a in back.attempts)
