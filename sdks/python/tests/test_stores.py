"""End to end on every store the server runs on (embedded, PostgreSQL,
Redis): a batch submitted, worked on the Work stream with failures,
dead-lettered, exported, redriven and worked again; a task of a killed
worker coming back through lease expiry."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import rdq
from conftest import TOKEN, Server, wait_for
from rdq.envelope import Outcome, Status

SCRIPT = Path(__file__).with_name("worker_process.py")


def test_submit_work_dead_letter_and_redrive(any_store_server: Server, queue: str) -> None:
    server = any_store_server
    healed = False

    async def scenario() -> None:
        nonlocal healed
        async with server.async_client() as client:
            await client.set_queue_config(queue, {"max_attempts": 2, "backoff": {"kind": "none"}})
            results = await client.submit_batch(
                [rdq.Submit(queue, "sum", {"n": i}, idempotency_key=f"k{i}") for i in range(40)]
            )
            assert all(r.status == 201 for r in results)
            ids = [r.envelope.id for r in results if r.envelope is not None]
            dead_letters: list[str] = []
            worker = rdq.Worker(
                client, queues=[queue], concurrency=8, on_dead_letter=lambda e: dead_letters.append(e.id)
            )

            @worker.handler("sum")
            async def add(payload: dict[str, int]) -> None:
                if payload["n"] % 10 == 0 and not healed:
                    raise RuntimeError("multiples of ten fail until healed")

            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                while True:
                    envs = [await client.get(i) for i in ids]
                    if all(e.status in (Status.SUCCEEDED, Status.DEAD) for e in envs):
                        break
                    await asyncio.sleep(0.05)
                dead = [e for e in envs if e.status == Status.DEAD]
                assert sorted(e.payload_json()["n"] for e in dead) == [0, 10, 20, 30]  # type: ignore[index]
                assert all([a.outcome for a in e.attempts] == [Outcome.RETRYABLE_FAILURE] * 2 for e in dead)
                exported = [e async for e in client.dlq_export(queue)]
                assert sorted(e.id for e in exported) == sorted(e.id for e in dead)
                while len(dead_letters) < 4:
                    await asyncio.sleep(0.01)
                assert sorted(dead_letters) == sorted(e.id for e in dead)

                healed = True
                assert (await client.dlq_redrive(queue)).count == 4
                while not all(e.status == Status.SUCCEEDED for e in [await client.get(d.id) for d in dead]):
                    await asyncio.sleep(0.05)
                again = await client.get(dead[0].id)
                assert again.redrive_count == 1 and again.attempts[-1].outcome == Outcome.SUCCESS
                assert (await client.dlq_list(queue)).items == []
            finally:
                worker.stop()
                await running

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_killed_workers_task_comes_back(any_store_server: Server, queue: str) -> None:
    server = any_store_server
    with server.client() as client:
        client.set_queue_config(queue, {"lease_ms": 1000, "backoff": {"kind": "none"}})
        task = client.submit(queue, "hang")
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), server.url, TOKEN, queue, "grpc", "30"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().split() == ["started", task.id]
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(30)
        back = wait_for(client, task.id, lambda e: e.status == Status.PENDING and e.attempts, "PENDING again")
        assert [a.outcome for a in back.attempts] == [Outcome.LEASE_EXPIRED]
