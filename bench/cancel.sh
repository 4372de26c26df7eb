#!/usr/bin/env bash
# Cancelling running tasks (docs/benchmarks.md, "Cancelling running tasks"):
# two `rdq serve` nodes on one PostgreSQL schema; tasks are submitted and
# cancelled on node A and worked on node B, which must hear of each cancel
#   - at once on a gRPC Work stream (target: within 50 ms), and
#   - at an HTTP worker's next lease extension (target: within one
#     extension interval, EXTEND_MS).
#
#   bash bench/cancel.sh RDQ [JOBS] [EXTEND_MS]   (defaults: 1000 and 200)
#
# PostgreSQL on 127.0.0.1:5432 (scripts/services.sh). The schema is dropped
# afterwards.
set -u
RDQ=$1; JOBS=${2:-1000}; EXTEND_MS=${3:-200}
SCHEMA="rdq_cancel_bench_$$"
STORE="postgres://postgres@127.0.0.1:5432/test?schema=$SCHEMA"
cd "$(mktemp -d)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
A=$(free_port); B=$(free_port)
"$RDQ" serve --listen "127.0.0.1:$A" --store "$STORE" >a.log 2>&1 & PA=$!
"$RDQ" serve --listen "127.0.0.1:$B" --store "$STORE" >b.log 2>&1 & PB=$!
cleanup() {
  kill "$PA" "$PB" 2>/dev/null; wait "$PA" "$PB" 2>/dev/null
  psql -q -h 127.0.0.1 -U postgres -d test -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1
}
trap cleanup EXIT
for port in "$A" "$B"; do
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
done
"$RDQ" bench --workload cancel --server "http://127.0.0.1:$A" --worker-server "http://127.0.0.1:$B" \
  --jobs "$JOBS" --concurrency "${CONCURRENCY:-1}" --extend-ms "$EXTEND_MS" --json
