#!/usr/bin/env bash
# W1 on River and on the rdq Go SDK (through `rdq serve` on PostgreSQL),
# alternately, PAIRS times; then prints each pair's ratio (rdq / River).
#
#   bash bench/river/run.sh                 # 3 pairs of W1, 20,000 jobs
#   PAIRS=5 JOBS=20000 bash bench/river/run.sh
#   RIVER_FETCH_COOLDOWN=100ms bash bench/river/run.sh   # River's default (1 ms, its minimum, otherwise)
#   WORKLOAD=pull bash bench/river/run.sh   # Go SDK worker vs `rdq bench --workload pull`,
#                                           # both against one `rdq serve` on the embedded store, HTTP
#   WORKLOAD=pull-grpc bash bench/river/run.sh   # the same on the gRPC Work stream: 4 workers,
#                                                # 128 credits each, on both sides
#   GO_TRANSPORT=http bash bench/river/run.sh    # W1 with the Go worker polling over HTTP
#                                                # (default: grpc, the Work stream)
#   GO_FLAGS="-prefetch 64" bash bench/river/run.sh   # more flags for the Go program
#   WORKLOAD=txinsert bash bench/river/run.sh   # transactional inserts: JOBS inserts by 64
#                                               # goroutines, each BEGIN; insert; COMMIT on a
#                                               # pgxpool: River's InsertTx against rdq's Go
#                                               # pg.SubmitPgx (rdq serve is not involved;
#                                               # RDQ_BIN only runs `rdq migrate`)
#
# RDQ_BIN names a release rdq binary; without it the script runs
# `cargo build --release -p rdq-cli --bin rdq` and uses target/release/rdq.
# Both W1 programs use their own schema in PG_URL's database and drop it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PAIRS=${PAIRS:-3}
JOBS=${JOBS:-20000}
WORKLOAD=${WORKLOAD:-w1}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
PORT=${PORT:-17481}
OUT=$(mktemp -d)
trap 'stop_server; rm -rf "$OUT"' EXIT

if [ -z "${RDQ_BIN:-}" ]; then
  (cd "$ROOT" && cargo build --release -p rdq-cli --bin rdq)
  RDQ_BIN=$ROOT/target/release/rdq
fi
(cd "$ROOT/bench/river" && go build -o "$OUT/river-w1" .)
(cd "$ROOT/sdks/go" && go build -o "$OUT/rdq-bench-w1" ./cmd/rdq-bench-w1)

SERVER_PID=
start_server() { # store
  "$RDQ_BIN" serve --listen "127.0.0.1:$PORT" --store "$1" --log warn >"$OUT/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 200); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  cat "$OUT/serve.log" >&2
  return 1
}
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
drop_schema() { psql "$PG_URL" -q -c "DROP SCHEMA IF EXISTS $1 CASCADE" >/dev/null 2>&1 || true; }

for i in $(seq 1 "$PAIRS"); do
  if [ "$WORKLOAD" = txinsert ]; then
    "$OUT/river-w1" -workload txinsert -system river -db "$PG_URL" -schema river_tx -jobs "$JOBS" 2>/dev/null | tee -a "$OUT/a.jsonl"
    drop_schema rdq_go_tx
    "$RDQ_BIN" migrate --store "$PG_URL?schema=rdq_go_tx" >/dev/null
    "$OUT/river-w1" -workload txinsert -system rdq -db "$PG_URL" -schema rdq_go_tx -jobs "$JOBS" | tee -a "$OUT/b.jsonl"
    drop_schema rdq_go_tx
  elif [ "$WORKLOAD" = pull ] || [ "$WORKLOAD" = pull-grpc ]; then
    if [ "$WORKLOAD" = pull ]; then
      rust=() go=(-transport http -concurrency 64 -paused-start)
    else
      rust=(--grpc) go=(-transport grpc -concurrency 128 -paused-start)
    fi
    # A fresh server and data directory for each run, so neither runs on
    # the other's leftovers.
    rm -rf "$OUT/data" && start_server "$OUT/data"
    "$RDQ_BIN" bench --workload pull "${rust[@]}" --server "http://127.0.0.1:$PORT" --jobs "$JOBS" --workers 4 --json \
      | tail -n 1 | tee -a "$OUT/a.jsonl"
    stop_server
    rm -rf "$OUT/data" && start_server "$OUT/data"
    # shellcheck disable=SC2086 # GO_FLAGS is a list of flags
    "$OUT/rdq-bench-w1" -url "http://127.0.0.1:$PORT" -jobs "$JOBS" -workers 4 "${go[@]}" ${GO_FLAGS:-} \
      | tee -a "$OUT/b.jsonl"
    stop_server
  else
    "$OUT/river-w1" -db "$PG_URL" -schema river_w1 -jobs "$JOBS" -fetch-cooldown "${RIVER_FETCH_COOLDOWN:-1ms}" 2>/dev/null | tee -a "$OUT/a.jsonl"
    drop_schema rdq_go_w1
    start_server "$PG_URL?schema=rdq_go_w1"
    # shellcheck disable=SC2086 # GO_FLAGS is a list of flags
    "$OUT/rdq-bench-w1" -url "http://127.0.0.1:$PORT" -jobs "$JOBS" -transport "${GO_TRANSPORT:-grpc}" ${GO_FLAGS:-} | tee -a "$OUT/b.jsonl"
    stop_server
    drop_schema rdq_go_w1
  fi
done

python3 - "$OUT/a.jsonl" "$OUT/b.jsonl" "$WORKLOAD" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
if sys.argv[3] == "txinsert":
    print("pair | River InsertTx inserts/s | rdq pg.SubmitPgx inserts/s | ratio (rdq / River)")
    ratios = []
    for i, (x, y) in enumerate(zip(a, b), 1):
        ratios.append(y["inserts_per_s"] / x["inserts_per_s"])
        print(f"{i} | {x['inserts_per_s']:,.0f} | {y['inserts_per_s']:,.0f} | {ratios[-1]:.2f}")
    ratios.sort()
    print(f"median ratio {ratios[len(ratios) // 2]:.2f}")
    sys.exit(0)
pull = sys.argv[3].startswith("pull")
name = "rdq bench pull (Rust)" if pull else "River"
def rate(d, k):
    return d.get(k) or d.get(k.replace("submits", "submit").replace("worked", "work"))
print(f"pair | {name} submits/s | Go SDK submits/s | ratio | {name} worked/s | Go SDK worked/s | ratio")
for i, (x, y) in enumerate(zip(a, b), 1):
    xs, ys = rate(x, "submits_per_s"), rate(y, "submits_per_s")
    xw, yw = rate(x, "worked_per_s"), rate(y, "worked_per_s")
    print(f"{i} | {xs:,.0f} | {ys:,.0f} | {ys/xs:.2f} | {xw:,.0f} | {yw:,.0f} | {yw/xw:.2f}")
EOF
