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
#   PYTHON=/path/to/python3.13 SKIP_CELERY=1 bash bench/celery/run.sh
#
# PYTHON is the interpreter of the rdq SDK's side (default python3; the
# worker starts handlers eagerly on 3.12 and newer); SKIP_CELERY=1 runs only
# the SDK and the ceiling.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rdq="${RDQ:-$root/target/release/rdq}"
rounds="${ROUNDS:-3}"
export JOBS="${JOBS:-20000}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
[ -x "$rdq" ] || { echo "build rdq first: cargo build --release -p rdq-cli --bin rdq" >&2; exit 1; }

python="${PYTHON:-python3}"
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv() { # python dir requirement... (the local SDK is installed afresh every run)
  local py=$1 dir=$2
  shift 2
  if [ ! -x "$dir/bin/python" ]; then "$py" -m venv "$dir"; fi
  "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
}
[ -n "${SKIP_CELERY:-}" ] || venv python3 "$root/target/bench-celery-venv" -r "$here/requirements.txt"
sdk_venv="$root/target/bench-rdq-py$pyver-venv"
venv "$python" "$sdk_venv" "$root/sdks/python"

data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$rdq" serve --listen "127.0.0.1:$port" --store "$data/store" --log warn &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$data"' EXIT
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.1; done

for _ in $(seq 1 "$rounds"); do
  RDQ_URL="http://127.0.0.1:$port" "$sdk_venv/bin/python" "$here/drain_rdq.py"
  [ -n "${SKIP_CELERY:-}" ] || "$root/target/bench-celery-venv/bin/python" "$here/drain_celery.py"
  "$rdq" bench --workload pull --grpc --server "http://127.0.0.1:$port" --jobs "$JOBS" --json
done
