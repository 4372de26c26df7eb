"""docs/benchmarks.md W1 (drain) through the Python SDK: submit JOBS no-op
tasks (about 100 bytes of JSON each) with 64 `submit` calls in flight, then
work them with one `rdq.Worker` of concurrency 64 on the gRPC Work stream
(an `async def` no-op handler; 448 tasks prefetched beyond the 64 running:
512 credits, what the four Rust workers of `rdq bench --workload pull
--grpc` hold together, and half of the 1,024 messages Celery's worker
prefetches at `worker_prefetch_multiplier` 16), and
report submits/s and worked/s. The tasks go into a paused queue; the worker
is started and then timed from resuming the queue until the server counts
every task SUCCEEDED, as `rdq bench --workload pull` times its own workers
(and drain_celery.py Celery's from its worker being ready). Prints one JSON line. Run through
run.sh, against a running `rdq serve` (RDQ_URL).

Environment: RDQ_URL (default http://127.0.0.1:7480), JOBS (20000),
CONCURRENCY (64), PREFETCH (448), STREAMS (1), TRANSPORT (grpc or http).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import time
import uuid

import rdq

URL = os.environ.get("RDQ_URL", "http://127.0.0.1:7480")
JOBS = int(os.environ.get("JOBS", "20000"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "64"))
TRANSPORT = os.environ.get("TRANSPORT", "grpc")
PREFETCH = int(os.environ.get("PREFETCH", "448"))
STREAMS = int(os.environ.get("STREAMS", "1"))
IN_FLIGHT = 64


def payload(i: int) -> dict[str, object]:
    return {
        "submitted_us": time.time_ns() // 1000,
        "order_id": i,
        "note": "rdq python bench no-op task, about 100 bytes",
    }


async def main() -> None:
    queue = f"bench-py-{uuid.uuid4().hex[:8]}"
    async with rdq.AsyncClient(URL, max_connections=IN_FLIGHT) as client:
        # Into a paused queue: the worker is started, and then timed from
        # resuming the queue, as `rdq bench --workload pull` times its own.
        await client.set_queue_config(queue, {"paused": True})
        counter = iter(range(JOBS))

        async def submitter() -> None:
            for i in counter:
                await client.submit(queue, "noop", payload(i))

        start = time.perf_counter()
        await asyncio.gather(*(submitter() for _ in range(IN_FLIGHT)))
        submit_s = time.perf_counter() - start

        worker = rdq.Worker(
            client,
            queues=[queue],
            concurrency=CONCURRENCY,
            prefetch=PREFETCH,
            transport=TRANSPORT,  # type: ignore[arg-type]
            streams=STREAMS,
        )

        ran = 0
        all_ran = asyncio.Event()

        @worker.handler("noop")
        async def noop() -> None:
            nonlocal ran
            ran += 1
            if ran >= JOBS:
                all_ran.set()

        running = asyncio.create_task(worker.run(handle_signals=False))
        await asyncio.sleep(0.5)  # the worker's stream is open and waiting
        start = time.perf_counter()
        cpu = time.process_time()
        await client.set_queue_config(queue, {"paused": False})
        # Polling the server all along would take the worker's own event
        # loop from it: wait until every handler ran, then until the server
        # counts every task SUCCEEDED (the last settles still on their way).
        await all_ran.wait()
        while True:
            (counts,) = await client.queues([queue])
            if counts.succeeded == JOBS:
                break
            await asyncio.sleep(0.002)
        work_s = time.perf_counter() - start
        work_cpu = time.process_time() - cpu
        worker.stop()
        await running
    print(json.dumps({
        "peer": "rdq-sdk-python", "python": platform.python_version(), "transport": TRANSPORT, "workload": "drain", "jobs": JOBS,
        "concurrency": CONCURRENCY, "prefetch": PREFETCH, "streams": STREAMS, "submits_per_s": round(JOBS / submit_s),
        "worked_per_s": round(JOBS / work_s), "submit_s": round(submit_s, 3), "work_s": round(work_s, 3),
        "work_cpu_us_per_task": round(work_cpu / JOBS * 1e6, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
