#!/usr/bin/env bash
# Flow control's benchmarks (docs/benchmarks.md, "Flow control"), in one run:
#   1. W1 drain on a queue with no flow limits, BASE against NEW in
#      alternating pairs, on the embedded store and on PostgreSQL;
#   2. flow-limit: a global concurrency limit of 64 against the same queue
#      unlimited, three nodes on one PostgreSQL schema, with no-op handlers
#      and with handlers that work 10 ms;
#   3. fairness: 10,000 tasks of one key and 100 of another, 16 handlers;
#   4. flow-exact: 100,000 claims under per-key and global limits, with
#      weighted fairness and in claim order, on every
#      store that keeps flow limits (three nodes where the store is shared).
#
#   bash bench/flow.sh BASE_RDQ NEW_RDQ [PAIRS]   (PAIRS defaults to 5)
#
# PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (scripts/services.sh).
# Each run works in a schema / key prefix of its own, dropped afterwards.
set -u
B=$1; N=$2; P=${3:-5}
# Only some parts: FLOW_BENCH_PARTS="w1-embedded w1-postgres limit fairness exact".
PARTS=${FLOW_BENCH_PARTS:-w1-embedded w1-postgres limit fairness exact}
part() { [[ " $PARTS " == *" $1 "* ]]; }
PG='postgres://postgres@127.0.0.1:5432/test'
cd "$(mktemp -d)"
# A fresh schema / prefix name per call (a counter file: $(fresh) runs in a
# subshell, where a variable's increment would be lost).
echo 0 > counter
fresh() { local n; n=$(($(cat counter) + 1)); echo "$n" > counter; echo "rdq_flow_bench_$$_$n"; }
drop() { psql -q -h 127.0.0.1 -U postgres -d test -c "DROP SCHEMA IF EXISTS $1 CASCADE" >/dev/null 2>&1; }
rates() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f %.0f" % (d.get("work_per_s",0), d.get("submit_per_s",0)))'; }
w1() { # bin store
  sync; sleep 1
  "$1" bench --workload drain --jobs 20000 --concurrency 64 --store "$2" --json 2>/dev/null | rates
}

part w1-embedded && echo "== W1 drain, no flow limits: embedded"
part w1-embedded && for i in $(seq 1 "$P"); do
  b=$(w1 "$B" "$PWD/base-$i"); nw=$(w1 "$N" "$PWD/new-$i"); rm -rf "$PWD/base-$i" "$PWD/new-$i"
  echo "embedded | pair $i | base worked,submitted/s: $b | new: $nw"
done
part w1-postgres && echo "== W1 drain, no flow limits: PostgreSQL"
part w1-postgres && for i in $(seq 1 "$P"); do
  sb=$(fresh); sn=$(fresh)
  b=$(w1 "$B" "$PG?schema=$sb"); nw=$(w1 "$N" "$PG?schema=$sn"); drop "$sb"; drop "$sn"
  echo "postgres | pair $i | base worked,submitted/s: $b | new: $nw"
done

if part limit; then
  echo "== flow-limit: concurrency 64 against unlimited, 3 nodes on PostgreSQL"
  s=$(fresh)
  "$N" bench --workload flow-limit --store "$PG?schema=$s" --nodes 3 --concurrency 64 --jobs 20000 --pairs 3 --json
  drop "$s"
  echo "== flow-limit: the same with handlers that work 10 ms"
  s=$(fresh)
  "$N" bench --workload flow-limit --store "$PG?schema=$s" --nodes 3 --concurrency 64 --jobs 20000 --pairs 3 --handler-ms 10 --json
  drop "$s"
fi

if part fairness; then
  echo "== fairness: 10,000 loud and 100 quiet, 16 handlers"
  "$N" bench --workload fairness --store "$PWD/fair" --jobs 10000 --concurrency 16 --json
  s=$(fresh)
  "$N" bench --workload fairness --store "$PG?schema=$s" --jobs 10000 --concurrency 16 --json
  drop "$s"
fi

if part exact; then
  echo "== flow-exact: 100,000 claims per store"
  "$N" bench --workload flow-exact --store memory: --jobs 100000 --concurrency 64 --json
  "$N" bench --workload flow-exact --store "$PWD/exact" --jobs 100000 --concurrency 64 --json
  s=$(fresh)
  "$N" bench --workload flow-exact --store "$PG?schema=$s" --nodes 3 --concurrency 32 --jobs 100000 --json
  drop "$s"
  "$N" bench --workload flow-exact --store "redis://127.0.0.1:6379/?prefix=$(fresh)" --nodes 3 --concurrency 32 --jobs 100000 --json
  redis-cli --scan --pattern "rdq_flow_bench_$$_*" | xargs -r redis-cli del >/dev/null
fi
