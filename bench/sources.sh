#!/usr/bin/env bash
# Sources against each system's own consumer, in one run (docs/benchmarks.md,
# "Sources"): N records of 100 bytes waiting in a Kafka topic and in a
# JetStream stream; Kafka's ConsumerPerformance and `nats bench js fetch`
# read them; then `rdq bench --workload source` turns them into tasks on a
# fresh embedded store. Prints each rate and the ratio.
#
#   bash bench/sources.sh [RDQ_BINARY] [RECORDS]   (defaults: target/release/rdq, 1000000)
#
# Needs the services of scripts/services.sh, and the `nats` CLI
# (`ensure_nats_cli` in scripts/services.sh) for the JetStream part.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rdq=${1:-$root/target/release/rdq}
n=${2:-1000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/services.sh
source "$root/scripts/services.sh"
ensure_kafka >/dev/null
ensure_nats >/dev/null
kafka() { bash "$root/scripts/kafka-node.sh" "$@"; }

rate() { # json-key
  python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# Kafka: three partitions, filled by Kafka's producer benchmark.
topic="bench-sources-$$"
kafka topic 127.0.0.1:9092 "$topic" 3 >/dev/null
kafka tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$n" \
  --record-size 100 --throughput -1 --command-property bootstrap.servers=127.0.0.1:9092 >/dev/null
sync; sleep 1
peer=$(kafka tool org.apache.kafka.tools.ConsumerPerformance --bootstrap-server 127.0.0.1:9092 \
  --topic "$topic" --num-records "$n" --group "perf-$$" 2>/dev/null | tail -1 | awk -F', *' '{print $6}')
cat >"$work/kafka.toml" <<TOML
[[sources]]
name = "bench.kafka"
queue = "bench.kafka"
handler = "bench.noop"
batch = 2000
[sources.kafka]
brokers = "127.0.0.1:9092"
topic = "$topic"
group = "rdq-$$"
TOML
sync; sleep 1
ours=$("$rdq" bench --workload source --config "$work/kafka.toml" --jobs "$n" --store "$work/kafka-store" | rate records_per_sec)
echo "kafka: ${n} records of 100 bytes, 3 partitions"
echo "  ConsumerPerformance  ${peer%.*} records/s"
echo "  rdq source (embedded) ${ours} records/s"
python3 -c "print('  ratio %.2f' % ($ours / float('$peer')))"

# JetStream: `nats bench` publishes into a stream, then fetches it through a
# durable consumer (as the source does).
if nats=$(command -v nats || echo /usr/local/lib/rdq-tools/nats) && [ -x "$nats" ]; then
  stream="BENCH_$$"
  "$nats" --server nats://127.0.0.1:4222 bench js pub async "bench.$$" --stream "$stream" --create \
    --storage file --msgs "$n" --size 100 --no-progress >/dev/null 2>&1
  sync; sleep 1
  peer=$("$nats" --server nats://127.0.0.1:4222 bench js fetch --stream "$stream" --msgs "$n" \
    --no-progress 2>&1 | grep -oE '[0-9,]+ msgs/sec' | head -1 | tr -d ', msgs/ec')
  cat >"$work/nats.toml" <<TOML
[[sources]]
name = "bench.nats"
queue = "bench.nats"
handler = "bench.noop"
batch = 2000
[sources.nats]
url = "nats://127.0.0.1:4222"
stream = "$stream"
TOML
  sync; sleep 1
  ours=$("$rdq" bench --workload source --config "$work/nats.toml" --jobs "$n" --store "$work/nats-store" | rate records_per_sec)
  echo "jetstream: ${n} records of 100 bytes"
  echo "  nats bench js fetch  ${peer} records/s"
  echo "  rdq source (embedded) ${ours} records/s"
  python3 -c "print('  ratio %.2f' % ($ours / float('$peer')))"
  "$nats" --server nats://127.0.0.1:4222 stream rm "$stream" -f >/dev/null
else
  echo "jetstream: skipped (no nats CLI: run ensure_nats_cli from scripts/services.sh)"
fi
kafka tool org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 --delete --topic "$topic" >/dev/null 2>&1 || true
