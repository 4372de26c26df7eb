"""docs/benchmarks.md W1 (drain) on Celery 5 with Redis as the broker: send
JOBS no-op tasks (about 100 bytes of JSON each) from 64 threads
(`apply_async`, 64 in flight), then start a worker with 64 threads
(`-P threads -c 64`) and report submits/s and worked/s (from the worker
being ready to its last task). Prints one JSON line. Run through run.sh.

Environment: REDIS_URL (default redis://127.0.0.1:6379), JOBS (20000).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import celery
import redis

HERE = Path(__file__).resolve().parent
JOBS = int(os.environ.get("JOBS", "20000"))
IN_FLIGHT = 64
RUN = f"bench-celery-{uuid.uuid4().hex[:8]}"
os.environ["BENCH_RUN"] = RUN
sys.path.insert(0, str(HERE))

from celery_tasks import BROKER, noop


def payload(i: int) -> dict[str, object]:
    return {
        "submitted_us": time.time_ns() // 1000,
        "order_id": i,
        "note": "celery bench no-op task, about 100 bytes",
    }


def main() -> None:
    r = redis.Redis.from_url(BROKER)
    counter = iter(range(JOBS))
    lock = threading.Lock()

    def submitter() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            noop.apply_async(args=[payload(i)], queue=RUN)

    start = time.perf_counter()
    threads = [threading.Thread(target=submitter) for _ in range(IN_FLIGHT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    submit_s = time.perf_counter() - start

    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "-Q", RUN, "-P", "threads", "-c", "64",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"],
        cwd=HERE, env={**os.environ, "BENCH_RUN": RUN, "JOBS": str(JOBS)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while r.get(f"{RUN}:done") is None:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the Celery worker did not finish")
            time.sleep(0.01)
        ready = float(r.get(f"{RUN}:ready") or 0)
        done = float(r.get(f"{RUN}:done") or 0)
    finally:
        worker.terminate()
        worker.wait(60)
        r.delete(f"{RUN}:ready", f"{RUN}:done", RUN)
    work_s = done - ready
    print(json.dumps({
        "peer": "celery", "version": celery.__version__, "pool": "threads", "workload": "drain", "jobs": JOBS,
        "concurrency": 64, "submits_per_s": round(JOBS / submit_s), "worked_per_s": round(JOBS / work_s),
        "submit_s": round(submit_s, 3), "work_s": round(work_s, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
