#!/usr/bin/env bash
# The dashboard's DLQ reads with 100,000 dead tasks in one queue
# (docs/dashboard.md): the DLQ page (newest first, the first page, a page
# deep in the queue, a page filtered by error type) and the error-type
# breakdown, on the embedded store and on PostgreSQL. Target: each < 300 ms.
#
#   bash bench/dashboard/run.sh                  # 100,000 dead tasks, both stores
#   DEAD=20000 STORES=embedded bash bench/dashboard/run.sh
#
# RDQ_BIN names a release rdq binary; without it the script runs
# `cargo build --release -p rdq-cli --bin rdq` and uses target/release/rdq.
# Each request is timed by curl over loopback (RUNS times, median reported,
# after one warm-up). PostgreSQL runs in its own schema, dropped at the end.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEAD=${DEAD:-100000}
RUNS=${RUNS:-7}
STORES=${STORES:-embedded postgres}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
PORT=${PORT:-17483}
QUEUE=bench.dlq
BASE=http://127.0.0.1:$PORT
OUT=$(mktemp -d)
SCHEMA=rdq_dash_bench_$$
SERVER_PID=

stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
cleanup() {
  stop_server
  psql "$PG_URL" -q -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true
  rm -rf "$OUT"
}
trap cleanup EXIT

if [ -z "${RDQ_BIN:-}" ]; then
  (cd "$ROOT" && cargo build --release -p rdq-cli --bin rdq)
  RDQ_BIN=$ROOT/target/release/rdq
fi

start_server() { # store
  "$RDQ_BIN" serve --listen "127.0.0.1:$PORT" --store "$1" --log warn >"$OUT/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 400); do
    curl -sf "$BASE/readyz" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  cat "$OUT/serve.log" >&2
  exit 1
}

# One real dead task (submitted, claimed, failed over the API) is the
# template the bulk of the DLQ is copied from.
make_template() {
  curl -sf -X POST "$BASE/v1/tasks" -d "{\"queue\":\"$QUEUE\",\"handler_ref\":\"charge\",\"payload_json\":{\"order\":42,\"amount_cents\":4200}}" >/dev/null
  claim=$(curl -sf -X POST "$BASE/v1/queues/$QUEUE/claim" -d '{"max":1}')
  id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["tasks"][0]["id"])' <<<"$claim")
  token=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["tasks"][0]["lease_token"])' <<<"$claim")
  curl -sf -X POST "$BASE/v1/tasks/$id/settle" \
    -d "{\"lease_token\":\"$token\",\"outcome\":\"PERMANENT_FAILURE\",\"error\":{\"type\":\"x\",\"message\":\"x\"}}" >/dev/null
  curl -sf "$BASE/v1/queues/$QUEUE/dead/export" >"$OUT/template.jsonl"
  curl -sf -X DELETE "$BASE/v1/queues/$QUEUE/dead" >/dev/null
}

median_ms() { # url
  curl -s -o /dev/null "$1"   # warm-up
  for _ in $(seq 1 "$RUNS"); do
    curl -s -o /dev/null -w '%{time_total}\n' "$1"
  done | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]*1000}'
}

printf '%-10s %-34s %10s\n' store request median_ms
for store in $STORES; do
  case $store in
    embedded) spec=$OUT/data ;;
    postgres) spec="$PG_URL?schema=$SCHEMA" ;;
    *) echo "unknown store $store" >&2; exit 1 ;;
  esac
  start_server "$spec"
  make_template
  python3 "$ROOT/bench/dashboard/make_dead.py" "$OUT/template.jsonl" "$DEAD" >"$OUT/dead.jsonl"
  curl -sf -X POST --data-binary "@$OUT/dead.jsonl" -H 'content-type: application/x-ndjson' \
    "$BASE/v1/queues/$QUEUE/dead/import" >/dev/null
  [ "$store" = postgres ] && psql "$PG_URL" -q -c "ANALYZE $SCHEMA.tasks" >/dev/null
  count=$(curl -sf "$BASE/v1/queues/$QUEUE/dead/breakdown" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
  [ "$count" = "$DEAD" ] || { echo "expected $DEAD dead tasks, found $count" >&2; exit 1; }
  # A cursor half way down the DLQ: the id of the middle line (ids ascend).
  middle=$(sed -n "$((DEAD / 2))p" "$OUT/dead.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  for req in \
    "DLQ page 1 (50, newest first)|/v1/queues/$QUEUE/dead?limit=50" \
    "DLQ page at the middle (50)|/v1/queues/$QUEUE/dead?limit=50&cursor=$middle" \
    "DLQ page, error_type=db.*|/v1/queues/$QUEUE/dead?limit=50&error_type=db.*" \
    "DLQ page, error_type=pdf.* (3%)|/v1/queues/$QUEUE/dead?limit=50&error_type=pdf.*" \
    "breakdown by error type|/v1/queues/$QUEUE/dead/breakdown" \
    "overview|/v1/overview"; do
    printf '%-10s %-34s %10s\n' "$store" "${req%%|*}" "$(median_ms "$BASE${req#*|}")"
  done
  stop_server
  [ "$store" = postgres ] && psql "$PG_URL" -q -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null
done
