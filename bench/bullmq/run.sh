#!/usr/bin/env bash
# rdq's Redis store against BullMQ on docs/benchmarks.md W1 (drain), on the same Redis
# and the same workload: 20,000 no-op tasks of about 100 bytes of JSON,
# single adds with 64 in flight, then worked with concurrency 64. Runs
# `rdq bench --store redis://…` and BullMQ alternately (ROUNDS times each,
# default 3) and prints one JSON line per run. rdq runs under a fresh key
# prefix that is deleted afterwards; BullMQ obliterates its queue.
#
#   cargo build --release -p rdq-cli --bin rdq
#   bash bench/bullmq/run.sh
#   REDIS_URL=redis://127.0.0.1:6379 ROUNDS=5 JOBS=20000 bash bench/bullmq/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rdq="${RDQ:-$root/target/release/rdq}"
url="${REDIS_URL:-redis://127.0.0.1:6379}"
rounds="${ROUNDS:-3}"
jobs="${JOBS:-20000}"
hostport="${url#redis://}"
hostport="${hostport%%/*}"
host="${hostport%%:*}"
port="${hostport##*:}"
[ -x "$rdq" ] || { echo "build rdq first: cargo build --release -p rdq-cli --bin rdq" >&2; exit 1; }
if [ ! -d "$here/node_modules/bullmq" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
for round in $(seq 1 "$rounds"); do
  prefix="bench_${round}_$$"
  "$rdq" bench --store "$url/?prefix=$prefix" --workload drain --jobs "$jobs" --json
  redis-cli -h "$host" -p "$port" --scan --pattern "*${prefix}*" \
    | xargs -r -n 500 redis-cli -h "$host" -p "$port" DEL >/dev/null
  (cd "$here" && REDIS_URL="$url" JOBS="$jobs" node drain.mjs)
done
