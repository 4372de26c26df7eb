#!/usr/bin/env bash
# Side by side on one broker: docs/benchmarks.md W1 (drain) and W3 (retry storm),
# queuey 1.1 (built here from the crate registry) against
# `rdq bench --store amqp://…`, same prefetch (64) and concurrency (64).
#
#   bench/queuey/run.sh [JOBS]
#
# Needs RabbitMQ on 127.0.0.1:5672 (scripts/services.sh starts it) and
# rabbitmqctl for cleanup. Prints one JSON line per system and workload,
# then the broker's own ceiling for the work phase (src/bin/broker-limit.rs):
# a consumer that only acks, each delivery alone, in runs of 16, and in runs
# of 16 after one hand-off between tasks per delivery; the last line fills
# its queue over 64 channels with one publish in flight each (rdq's way)
# instead of 64 in flight on one channel.
set -euo pipefail
cd "$(dirname "$0")"
JOBS="${1:-20000}"
URL="amqp://guest:guest@127.0.0.1:5672/%2f"
ROOT="$(cd ../.. && pwd)"

cargo build --release --quiet
(cd "$ROOT" && cargo build --release --quiet -p rdq-cli)

delete_queues() { # names...
  for q in "$@"; do rabbitmqctl delete_queue "$q" </dev/null >/dev/null 2>&1 || true; done
}

for workload in drain retry; do
  out="$(./target/release/queuey-bench "$workload" --jobs "$JOBS" --concurrency 64 --prefetch 64 --url "$URL")"
  echo "$out"
  # shellcheck disable=SC2046
  delete_queues $(echo "$out" | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["queues_to_delete"]))')

  ns="rdq-bench.$(date +%s%N)."
  "$ROOT/target/release/rdq" bench --json --workload "$workload" --jobs "$JOBS" --concurrency 64 \
    --store "$URL?prefetch=64&namespace=$ns"
  # shellcheck disable=SC2046
  delete_queues $(rabbitmqctl list_queues name </dev/null 2>/dev/null | grep "^$ns" || true)
done

for flags in "--ack-every 1" "--ack-every 16" "--ack-every 16 --handoff" "--ack-every 16 --channels 64"; do
  # shellcheck disable=SC2086
  ./target/release/broker-limit --jobs "$JOBS" --prefetch 64 --body-bytes 700 --url "$URL" $flags
done
