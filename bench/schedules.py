"""Periodic schedules at scale (docs/benchmarks.md, "Schedules"): three
`rdq serve` nodes on one PostgreSQL schema, N schedules firing every minute.

  python3 bench/schedules.py RDQ [N] [MINUTES]   (defaults: 10000 and 2)

Reports, in one JSON object:
- the idle cost of the scheduler: each node's CPU time over 30 s with no
  schedule, as a share of one core;
- for every due time fired: how many tasks it has (each must have one) and
  the lateness of each task (its `created_at` minus its `rdq.schedule_due`),
  p50 / p99 / max.

PostgreSQL on 127.0.0.1:5432 (scripts/services.sh); the schema is dropped
afterwards. Uses only the standard library.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

RDQ = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
MINUTES = int(sys.argv[3]) if len(sys.argv) > 3 else 2
SCHEMA = f"rdq_sched_bench_{os.getpid()}"
STORE = f"postgres://postgres@127.0.0.1:5432/test?schema={SCHEMA}"
QUEUE = "sched.bench"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def psql(sql: str) -> str:
    out = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-At", "-c", sql],
        check=True, capture_output=True, text=True)
    return out.stdout


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def put(base: str, i: int) -> None:
    body = json.dumps({
        "task": {"queue": QUEUE, "handler_ref": "noop"},
        "spec": {"cron": "* * * * *"},
    }).encode()
    req = urllib.request.Request(f"{base}/v1/schedules/s{i}", data=body, method="PUT",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        r.read()


def ms(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp() * 1000


def main() -> None:
    work = tempfile.mkdtemp()
    ports = [free_port() for _ in range(3)]
    nodes = []
    for i, port in enumerate(ports):
        log = open(os.path.join(work, f"node{i}.log"), "w")
        nodes.append(subprocess.Popen(
            [RDQ, "serve", "--listen", f"127.0.0.1:{port}", "--store", STORE],
            stdout=log, stderr=subprocess.STDOUT, cwd=work))
    try:
        for port in ports:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz").read()
                    break
                except OSError:
                    time.sleep(0.1)
        before = [cpu_seconds(p.pid) for p in nodes]
        time.sleep(30)
        idle = [(cpu_seconds(p.pid) - b) / 30 for p, b in zip(nodes, before)]
        base = f"http://127.0.0.1:{ports[0]}"
        started = time.time()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: put(base, i), range(N)))
        put_s = time.time() - started
        # Whole minutes after the last put, plus time for the last fires.
        now = time.time()
        first_due = (int(now // 60) + 1) * 60
        time.sleep(first_due + 60 * (MINUTES - 1) + 30 - now)
        rows = psql(
            f"SELECT convert_from(envelope, 'UTF8')::json -> 'headers' ->> 'rdq.schedule_due', "
            f"convert_from(envelope, 'UTF8')::json ->> 'created_at' "
            f"FROM {SCHEMA}.tasks WHERE queue = '{QUEUE}'").split()
        per_due: dict = {}
        late = []
        for row in rows:
            due, created = row.split("|")
            per_due[due] = per_due.get(due, 0) + 1
            late.append(ms(created) - ms(due))
        late.sort()
        pick = lambda q: late[min(len(late) - 1, int(round((len(late) - 1) * q)))] if late else None
        counts = psql(
            f"SELECT name, convert_from(envelope, 'UTF8')::json -> 'headers' ->> 'rdq.schedule_due' "
            f"FROM (SELECT convert_from(envelope, 'UTF8')::json -> 'headers' ->> 'rdq.schedule' AS name, envelope "
            f"FROM {SCHEMA}.tasks WHERE queue = '{QUEUE}') t").split()
        pairs = {}
        for row in counts:
            pairs[row] = pairs.get(row, 0) + 1
        print(json.dumps({
            "schedules": N,
            "put_seconds": round(put_s, 1),
            "idle_core_share": [round(x, 4) for x in idle],
            "tasks": len(late),
            "due_times": {d: n for d, n in sorted(per_due.items())},
            "duplicates": sum(1 for n in pairs.values() if n > 1),
            "lateness_ms": {"p50": pick(0.5), "p99": pick(0.99), "max": pick(1.0)},
        }))
    finally:
        for p in nodes:
            p.terminate()
        for p in nodes:
            p.wait()
        psql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


if __name__ == "__main__":
    main()
