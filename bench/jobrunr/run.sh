#!/usr/bin/env bash
# W1 (docs/benchmarks.md) for the Java SDK, alternating runs:
#
#  1. JobRunr (org.jobrunr:jobrunr, its PostgreSQL storage, HikariCP, 64
#     workers, the smallest poll interval its SQL storage accepts: 5 s) against
#     the rdq Java SDK through `rdq serve --store postgres://…`, on the same
#     database (postgres://postgres@127.0.0.1:5432/test).
#  2. The Java SDK worker against `rdq bench --workload pull` (the Rust pull
#     client) on the same `rdq serve` over an embedded store: both on the
#     gRPC Work stream (TRANSPORT=grpc, the default: 4 streams of 128
#     credits each), or both over HTTP (TRANSPORT=http: claim 64, batch
#     settle; the Java worker with 4 claim loops and 256 handlers).
#
#   bash bench/jobrunr/run.sh              # 3 pairs of each, 20,000 jobs
#   PAIRS=5 JOBS=20000 PULL_JOBS=100000 bash bench/jobrunr/run.sh
#   SKIP_JOBRUNR=1 bash bench/jobrunr/run.sh   # part 2 only (no PostgreSQL)
#   WARMUP=20000 bash bench/jobrunr/run.sh     # part 1 measured after a warm-up round
#   SUBMIT_PROTOCOL=grpc bash bench/jobrunr/run.sh  # the SDK submits over gRPC
#
# JOBS is W1's size (part 1); PULL_JOBS (default 100,000) the size of each
# run of part 2, long enough to measure a worker rather than its start-up.
# WARMUP (default 0) runs an untimed W1 round of that many jobs first in
# each part-1 program, JobRunr's and the SDK's alike, so both are measured
# with their JIT done compiling (as in a service that has run for a while);
# 0 measures a fresh JVM.
#
# RDQ_BIN overrides the rdq binary (default: cargo build --release). JAVA_HOME
# picks the JDK for both Java programs (virtual threads need 21+). Results go
# to stdout and bench/jobrunr/target/results.jsonl.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pairs=${PAIRS:-3}
jobs=${JOBS:-20000}
warmup=${WARMUP:-0}
pull_jobs=${PULL_JOBS:-100000}
transport=${TRANSPORT:-grpc}
pg_url=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
jdbc=${JDBC_URL:-jdbc:postgresql://127.0.0.1:5432/test?user=postgres}
java=${JAVA_HOME:+$JAVA_HOME/bin/}java

if [ -z "${RDQ_BIN:-}" ]; then
  (cd "$root" && cargo build --release --quiet -p rdq-cli --bin rdq)
  RDQ_BIN="$root/target/release/rdq"
fi
(cd "$root/sdks/java" && mvn -q -B -DskipTests install)
(cd "$here" && mvn -q -B clean package)
cp="$here/target/classes:$here/target/lib/*"
out="$here/target/results.jsonl"
: >"$out"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

serve_pid=
start_serve() { # store
  local p; p=$(port)
  "$RDQ_BIN" serve --listen "127.0.0.1:$p" --store "$1" --log warn >"$here/target/serve.log" 2>&1 &
  serve_pid=$!
  url="http://127.0.0.1:$p"
  for _ in $(seq 1 200); do
    curl -fs "$url/readyz" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "run.sh: rdq serve did not start" >&2; cat "$here/target/serve.log" >&2; exit 1
}
stop_serve() { kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; }
drop_schema() { psql -q -h 127.0.0.1 -U postgres -d test -c "DROP SCHEMA IF EXISTS $1 CASCADE" >/dev/null; }

run_jobrunr() {
  "$java" -cp "$cp" bench.JobRunrW1 "$jdbc" "$jobs" "$warmup" | tee -a "$out"
}
run_rdq_pg() {
  local schema="rdq_bench_java_$1"
  drop_schema "$schema"
  start_serve "$pg_url?schema=$schema"
  "$java" -cp "$cp" bench.RdqW1 "$url" "$jobs" 2 64 "$warmup" 2>/dev/null | sed 's/^{/{"store":"postgres",/' | tee -a "$out"
  stop_serve
  drop_schema "$schema"
}

if [ -z "${SKIP_JOBRUNR:-}" ]; then
  echo "== W1 on PostgreSQL: JobRunr vs the rdq Java SDK ($pairs pairs, $jobs jobs)"
  for i in $(seq 1 "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then run_jobrunr; run_rdq_pg "$i"; else run_rdq_pg "$i"; run_jobrunr; fi
  done
  drop_schema jobrunr_bench
fi

echo "== pull workers on one rdq serve (embedded store, $transport): Java SDK vs rdq bench --workload pull"
# As the Rust client: over gRPC 4 Work streams of 128 credits (512 handlers);
# over HTTP 4 claim loops and 256 handlers (its 4 workers x 64). The Java
# worker runs once after an untimed warm-up round of as many tasks (the JIT
# done compiling, as in a worker that has run for a while), once cold.
# JAVA_CONCURRENCY and JAVA_STREAMS change the Java worker's side.
if [ "$transport" = grpc ]; then rust_flags=--grpc; java_args="4 ${JAVA_CONCURRENCY:-512}"; else rust_flags=; java_args="4 ${JAVA_CONCURRENCY:-256}"; fi
java_streams=${JAVA_STREAMS:-4}
rust_pull() {
  "$RDQ_BIN" bench --workload pull $rust_flags --server "$url" --jobs "$pull_jobs" --workers 4 --json | sed 's/^{/{"system":"rdq-bench-pull",/' | tee -a "$out"
}
java_pull() { # warm-up jobs
  PAUSED_START=1 "$java" -cp "$cp" bench.RdqW1 "$url" "$pull_jobs" $java_args "$1" "$transport" "$java_streams" 2>/dev/null | sed 's/^{/{"store":"embedded",/' | tee -a "$out"
}
data=$(mktemp -d)
start_serve "$data/store"
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) -eq 1 ]; then rust_pull; java_pull "$pull_jobs"; java_pull 0; else java_pull "$pull_jobs"; java_pull 0; rust_pull; fi
done
stop_serve
rm -rf "$data"

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
jr = [r for r in rows if r.get("system") == "jobrunr"]
pg = [r for r in rows if r.get("system") == "rdq-java-sdk" and r.get("store") == "postgres"]
warm = [r for r in rows if r.get("system") == "rdq-java-sdk" and r.get("store") == "embedded" and r.get("warmup_jobs", 0) > 0]
cold = [r for r in rows if r.get("system") == "rdq-java-sdk" and r.get("store") == "embedded" and r.get("warmup_jobs", 0) == 0]
rust = [r for r in rows if r.get("system") == "rdq-bench-pull"]
def worked(r):
    for k in ("work_per_s", "worked_per_sec"):
        if k in r: return float(r[k])
    return float("nan")
print("pair  jobrunr submit/s  java-sdk submit/s  ratio   jobrunr worked/s  java-sdk worked/s  ratio")
for i, (a, b) in enumerate(zip(jr, pg), 1):
    print(f"{i:>4}  {a['submits_per_sec']:>16.0f}  {b['submits_per_sec']:>17.0f}  {b['submits_per_sec']/a['submits_per_sec']:>5.1f}x"
          f"  {a['worked_per_sec']:>16.0f}  {b['worked_per_sec']:>17.0f}  {b['worked_per_sec']/a['worked_per_sec']:>5.1f}x")
print("pair  rdq bench pull worked/s  java-sdk warm worked/s  java/rust  java-sdk cold worked/s  java/rust")
for i, (a, b, c) in enumerate(zip(rust, warm, cold), 1):
    print(f"{i:>4}  {worked(a):>23.0f}  {b['worked_per_sec']:>22.0f}  {b['worked_per_sec']/worked(a):>9.0%}"
          f"  {c['worked_per_sec']:>22.0f}  {c['worked_per_sec']/worked(a):>9.0%}")
PY
