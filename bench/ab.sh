#!/usr/bin/env bash
# A/B of two rdq binaries (docs/benchmarks.md): drain, pull (HTTP, gRPC) and
# callback (HTTP, gRPC), each pair alternating base then new, in one run.
#   bash bench/ab.sh BASE_RDQ NEW_RDQ [PAIRS]   (PAIRS defaults to 5)
set -u
B=$1; N=$2; P=${3:-5}
cd "$(mktemp -d)"
run() { # bin args...
  local bin=$1; shift
  sync; sleep 1
  "$bin" bench "$@" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f %.0f" % (d.get("work_per_s",0), d.get("submit_per_s",0)))'
}
for w in "drain --jobs 20000 --concurrency 64" "pull --jobs 40000 --workers 4" "pull --jobs 40000 --workers 4 --grpc" "callback --jobs 20000 --concurrency 64" "callback --jobs 20000 --concurrency 64 --grpc"; do
  for i in $(seq 1 "$P"); do
    b=$(run "$B" --workload $w); n=$(run "$N" --workload $w)
    echo "$w | pair $i | base worked,submitted/s: $b | new: $n"
  done
done
