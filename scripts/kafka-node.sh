#!/usr/bin/env bash
# A single-node Kafka (KRaft: broker and controller in one process, loopback
# only) and Kafka's command-line tools, from the jars that scripts/services.sh
# installs (it installs them here too when they are missing, on stderr).
#
#   kafka-node.sh DATA_DIR BROKER_PORT CONTROLLER_PORT [KEY=VALUE...]
#       Runs a broker on 127.0.0.1:BROKER_PORT (controller 127.0.0.1:CONTROLLER_PORT)
#       in the foreground until killed. Formats DATA_DIR on first use; started
#       again on the same DATA_DIR it keeps its topics and committed offsets.
#       KEY=VALUE pairs are broker settings that override the defaults below,
#       e.g. broker.session.timeout.ms=3000 broker.heartbeat.interval.ms=500
#       for a faster restart after a kill -9 (the new incarnation waits for the
#       old one's session, 9 s by default, to expire).
#       Logs to DATA_DIR/server.log (errors also on stderr).
#   kafka-node.sh ready BOOTSTRAP [SECONDS]
#       Waits (default 120 s) until the broker at BOOTSTRAP answers a topic listing.
#   kafka-node.sh topic BOOTSTRAP NAME PARTITIONS
#       Creates topic NAME with PARTITIONS partitions (replication 1) unless it exists.
#   kafka-node.sh tool MAIN_CLASS ARGS...
#       Runs a Kafka main class with the broker's classpath, e.g.
#         kafka-node.sh tool org.apache.kafka.tools.ProducerPerformance --topic t \
#           --num-records 100000 --record-size 100 --throughput -1 \
#           --command-property bootstrap.servers=127.0.0.1:9092
#         kafka-node.sh tool org.apache.kafka.tools.ConsumerPerformance \
#           --bootstrap-server 127.0.0.1:9092 --topic t --num-records 100000 --group g
#         kafka-node.sh tool org.apache.kafka.tools.TopicCommand \
#           --bootstrap-server 127.0.0.1:9092 --describe --topic t
#       KAFKA_TOOL_HEAP (default 512m) sets its heap.
#   kafka-node.sh classpath
#       Prints the classpath.
#
# JAVA_HOME, when set, chooses the JVM (Java 17 or newer); else `java`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/services.sh
source "$here/services.sh"

if ! kafka_installed; then install_kafka >&2; fi

java=java
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java=$JAVA_HOME/bin/java; fi
cp="$KAFKA_HOME/lib/*"
tools_log="-Dlog4j2.configurationFile=$here/kafka-log4j2-tools.properties"
# Short-lived administrative tools start faster with the client compiler.
quick=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "$tools_log")

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' >&2
  exit 2
}

run_node() { # data-dir broker-port controller-port [key=value...]
  local data=$1 port=$2 cport=$3
  shift 3
  mkdir -p "$data"
  data=$(cd "$data" && pwd)
  local props="$data/server.properties"
  cat >"$props" <<EOF
# Written by scripts/kafka-node.sh at each start.
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=127.0.0.1:$cport
log.dirs=$data/kraft-logs
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  local kv
  for kv in "$@"; do
    case $kv in
      *=*) echo "$kv" >>"$props" ;;
      *) echo "kafka-node.sh: '$kv' is not KEY=VALUE" >&2; exit 2 ;;
    esac
  done
  if ! [ -f "$data/kraft-logs/meta.properties" ]; then
    # A cluster id is 16 random bytes in URL-safe base64 without padding;
    # Kafka refuses one that starts with '-'.
    local id
    while :; do
      id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
      case $id in -*) ;; *) break ;; esac
    done
    "$java" "${quick[@]}" -cp "$cp" kafka.tools.StorageTool format --standalone \
      -t "$id" -c "$props" >&2
  fi
  exec "$java" -Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true -Dkafka.logs.dir="$data" \
    -Dlog4j2.configurationFile="$here/kafka-log4j2-server.properties" \
    -cp "$cp" kafka.Kafka "$props"
}

case "${1:-}" in
  ready)
    [ $# -ge 2 ] || usage
    bootstrap=$2 secs=${3:-120}
    host=${bootstrap%:*} port=${bootstrap##*:}
    end=$((SECONDS + secs))
    while [ $SECONDS -lt "$end" ]; do
      if port_open "$host" "$port" && timeout 60 "$java" "${quick[@]}" -cp "$cp" \
        org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --list >/dev/null 2>&1; then
        exit 0
      fi
      sleep 1
    done
    echo "kafka-node.sh: no answer from $bootstrap within ${secs}s" >&2
    exit 1
    ;;
  topic)
    [ $# -eq 4 ] || usage
    exec "$java" "${quick[@]}" -cp "$cp" org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "$2" --create --if-not-exists --topic "$3" \
      --partitions "$4" --replication-factor 1
    ;;
  tool)
    [ $# -ge 2 ] || usage
    main=$2
    shift 2
    exec "$java" "-Xmx${KAFKA_TOOL_HEAP:-512m}" -Djava.awt.headless=true "$tools_log" \
      -cp "$cp" "$main" "$@"
    ;;
  classpath)
    echo "$cp"
    ;;
  "" | -h | --help | help) usage ;;
  *)
    [ $# -ge 3 ] || usage
    run_node "$@"
    ;;
esac
