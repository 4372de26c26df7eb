"""The Celery app of the W1 benchmark: one no-op task, and worker signals
that write to Redis when the worker is ready and when it has finished
BENCH_JOBS tasks (so the driver measures from consuming to the last task).

Settings are Celery's documented ones for many short tasks ("Optimizing"
in Celery's guide): no result backend (`task_ignore_result`), early acks
(the default), a deep prefetch for short tasks, rate limits off, and the
worker started without gossip, mingle and heartbeat (see run.sh)."""

from __future__ import annotations

import os
import threading
import time

import redis
from celery import Celery
from celery.signals import task_postrun, worker_ready

BROKER = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379") + "/0"
RUN = os.environ.get("BENCH_RUN", "bench")
JOBS = int(os.environ.get("JOBS", "20000"))

app = Celery("rdq_bench", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    task_acks_late=False,
    worker_prefetch_multiplier=16,
    worker_disable_rate_limits=True,
    broker_pool_limit=64,
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop(payload: dict[str, object]) -> None:
    pass


_count = 0
_lock = threading.Lock()
_redis = redis.Redis.from_url(BROKER)


@worker_ready.connect
def _ready(**_: object) -> None:
    _redis.set(f"{RUN}:ready", repr(time.time()))


@task_postrun.connect
def _done(**_: object) -> None:
    global _count
    with _lock:
        _count += 1
        if _count == JOBS:
            _redis.set(f"{RUN}:done", repr(time.time()))
