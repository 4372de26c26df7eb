#!/usr/bin/env bash
# docs/benchmarks.md W1 (drain) through the Python SDK against Celery 5 on
# Redis, on the same machine in one run: 20,000 no-op tasks of about 100
# bytes of JSON, 64 submits in flight, then worked by 64 handlers.
#
#   rdq:    drain_rdq.py, the rdq-sdk Worker on the gRPC Work stream of a
#           fresh `rdq serve` (embedded store), async no-op handler;
#   celery: drain_celery.py, Celery 5 with Redis as the broker, a worker of
#           64 threads, Celery's settings for many short tasks;
#   ceiling: `rdq bench --workload pull --grpc` against the same server
#           (Rust Work-stream workers), the rate the server itself allows.
#
# Alternates ROUNDS times (default 3); one JSON line per run. Each tool in
# a venv of its own under target/.
#
#   RDQ=/path/to/rdq bash bench/celery/run.sh
#   REDIS_URL=redis://127.0.0.1:6379 ROUNDS=5 JOBS=20000 bash bench/celery/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rdq="${RDQ:-$root/target/release/rdq}"
rounds="${ROUNDS:-3}"
export JOBS="${JOBS:-20000}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
[ -x "$rdq" ] || { echo "build rdq first: cargo build --release -p rdq-cli --bin rdq" >&2; exit 1; }

venv() { # dir requirement... (the local SDK is installed afresh every run)
  local dir=$1
  shift
  if [ ! -x "$dir/bin/python" ]; then python3 -m venv "$dir"; fi
  "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
}
venv "$root/target/bench-celery-venv" -r "$here/requirements.txt"
venv "$root/target/bench-rdq-py-venv" "$root/sdks/python"

data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$rdq" serve --listen "127.0.0.1:$port" --store "$data/store" --log warn &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$data"' EXIT
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.1; done

for _ in $(seq 1 "$rounds"); do
  RDQ_URL="http://127.0.0.1:$port" "$root/target/bench-rdq-py-venv/bin/python" "$here/drain_rdq.py"
  "$root/target/bench-celery-venv/bin/python" "$here/drain_celery.py"
  "$rdq" bench --workload pull --grpc --server "http://127.0.0.1:$port" --jobs "$JOBS" --json
done
