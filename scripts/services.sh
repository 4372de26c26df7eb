#!/usr/bin/env bash
# Installs, configures and starts the local services the store tests talk to,
# idempotently, without systemd. See docs/testing.md for what it changes.
#
#   PostgreSQL  127.0.0.1:5432  trust auth for `postgres` from 127.0.0.1, database `test`
#   RabbitMQ    127.0.0.1:5672  guest/guest (the broker's default, loopback only)
#   Redis       127.0.0.1:6379  no persistence
#   Toxiproxy   /usr/local/lib/rdq-tools/toxiproxy-server (each network-fault test starts its own)
#   Kafka       127.0.0.1:9092  KRaft single node, controller 127.0.0.1:9093, topics are
#               not auto-created, data in /var/lib/rdq-kafka; scripts/kafka-node.sh
#               runs more nodes, creates topics and runs Kafka's tools
#   NATS        127.0.0.1:4222  JetStream on, data in /var/lib/rdq-nats, monitoring 127.0.0.1:8222
#   ElasticMQ   127.0.0.1:9324  SQS API (query and JSON protocols), messages in memory, region
#               us-east-1, account 000000000000; scripts/elasticmq-node.sh runs more
#   NATS CLI    /usr/local/lib/rdq-tools/nats (`nats bench`), only by `ensure_nats_cli`
#
# Nothing listens beyond loopback. Sourced by scripts/test.sh (which calls
# `ensure_services`), or run directly: `bash scripts/services.sh`.
# Each service prints one line saying what was done.

_apt_updated=""
_rdq_scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_for() { # name seconds command...
  local name=$1 secs=$2
  shift 2
  for _ in $(seq 1 "$secs"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "services: $name did not answer within ${secs}s" >&2
  return 1
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() { # package...
  if [ -z "$_apt_updated" ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    _apt_updated=1
  fi
  # The packages' own start attempts (no systemd here) are refused by a
  # temporary policy-rc.d, so nothing starts before it is configured.
  local policy=/usr/sbin/policy-rc.d created=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    created=1
  fi
  local rc=0 log
  log=$(mktemp)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" >"$log" 2>&1 || rc=$?
  if [ -n "$created" ]; then as_root rm -f "$policy"; fi
  if [ $rc -ne 0 ]; then cat "$log" >&2; fi
  rm -f "$log"
  return $rc
}

# Appends LINE to FILE unless FILE already has it; says whether it changed.
ensure_line() { # file line
  if ! as_root grep -qxF -- "$2" "$1" 2>/dev/null; then
    echo "$2" | as_root tee -a "$1" >/dev/null
    return 0
  fi
  return 1
}

ensure_postgres() {
  local did=()
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt_install postgresql || { echo "services: PostgreSQL: apt-get install postgresql failed" >&2; return 1; }
    did+=(installed)
  fi
  local ver
  # shellcheck disable=SC2012 # version-named folders
  ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
  if ! [ -d "/etc/postgresql/$ver/main" ]; then
    as_root pg_createcluster "$ver" main >/dev/null
    did+=("created cluster $ver/main")
  fi
  local conf="/etc/postgresql/$ver/main/conf.d/rdq.conf"
  if ! as_root test -f "$conf"; then
    printf "# rdq tests: loopback only\nlisten_addresses = '127.0.0.1'\nport = 5432\n" | as_root tee "$conf" >/dev/null
    did+=(configured)
  fi
  local hba="/etc/postgresql/$ver/main/pg_hba.conf"
  local rule="host    all    postgres    127.0.0.1/32    trust # rdq tests"
  if ! as_root grep -qxF -- "$rule" "$hba"; then
    # pg_hba is first-match: the rule goes on top.
    as_root sed -i "1i $rule" "$hba"
    did+=(trust-auth)
    if port_open 127.0.0.1 5432; then as_root pg_ctlcluster "$ver" main reload; fi
  fi
  if ! port_open 127.0.0.1 5432; then
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start
    wait_for PostgreSQL 60 pg_isready -q -h 127.0.0.1 -p 5432 || return 1
    did+=(started)
  fi
  wait_for PostgreSQL 60 pg_isready -q -h 127.0.0.1 -p 5432 || return 1
  if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'")" != 1 ]; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test' >/dev/null
    did+=("created database test")
  fi
  report PostgreSQL "127.0.0.1:5432" "${did[@]}"
}

ensure_rabbitmq() {
  local did=()
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    apt_install rabbitmq-server || { echo "services: RabbitMQ: apt-get install rabbitmq-server failed" >&2; return 1; }
    did+=(installed)
  fi
  local changed=""
  as_root mkdir -p /etc/rabbitmq
  as_root touch /etc/rabbitmq/rabbitmq.conf /etc/rabbitmq/rabbitmq-env.conf
  ensure_line /etc/rabbitmq/rabbitmq.conf "listeners.tcp.default = 127.0.0.1:5672" && changed=1
  ensure_line /etc/rabbitmq/rabbitmq.conf "distribution.listener.interface = 127.0.0.1" && changed=1
  ensure_line /etc/rabbitmq/rabbitmq-env.conf "export ERL_EPMD_ADDRESS=127.0.0.1" && changed=1
  ensure_line /etc/rabbitmq/rabbitmq-env.conf "NODENAME=rabbit@localhost" && changed=1
  if [ -n "$changed" ]; then did+=(configured); fi
  if ! port_open 127.0.0.1 5672; then
    # The broker's clustering daemon must listen on loopback too.
    as_root env ERL_EPMD_ADDRESS=127.0.0.1 rabbitmq-server -detached >/dev/null 2>&1
    wait_for RabbitMQ 120 port_open 127.0.0.1 5672 || return 1
    did+=(started)
  fi
  report RabbitMQ "127.0.0.1:5672" "${did[@]}"
}

ensure_redis() {
  local did=()
  if ! command -v redis-server >/dev/null 2>&1; then
    apt_install redis-server || { echo "services: Redis: apt-get install redis-server failed" >&2; return 1; }
    did+=(installed)
  fi
  if ! port_open 127.0.0.1 6379; then
    # No persistence: the machine's default for tests. The Redis store's
    # durability tests start their own redis-server with appendonly.
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no \
      --dir /tmp --logfile /tmp/rdq-redis-6379.log >/dev/null
    wait_for Redis 30 redis-cli -h 127.0.0.1 -p 6379 ping || return 1
    did+=(started)
  fi
  report Redis "127.0.0.1:6379" "${did[@]}"
}

# Toxiproxy, the fault proxy of the network-fault tests: built from its Go
# module at a fixed version into a fixed place. Nothing runs here; each test
# starts its own server on a free port.
TOXIPROXY_VERSION=v2.5.0
TOXIPROXY_BIN=/usr/local/lib/rdq-tools/toxiproxy-server

ensure_toxiproxy() {
  local did=() stamp="$TOXIPROXY_BIN.version"
  # `go install` leaves no version in the binary: a stamp beside it says which.
  if ! [ -x "$TOXIPROXY_BIN" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$TOXIPROXY_VERSION" ]; then
    local go=go
    if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
    if ! command -v "$go" >/dev/null 2>&1; then
      echo "services: Toxiproxy needs Go to build (Go 1.25 or newer, or Debian's golang package)" >&2
      return 1
    fi
    local gobin
    gobin=$(mktemp -d)
    GOBIN=$gobin GOFLAGS=-mod=mod "$go" install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" ||
      { echo "services: Toxiproxy: go install failed" >&2; rm -rf "$gobin"; return 1; }
    as_root install -D -m 0755 "$gobin/server" "$TOXIPROXY_BIN"
    echo "$TOXIPROXY_VERSION" | as_root tee "$stamp" >/dev/null
    rm -rf "$gobin"
    did+=(installed)
  fi
  local what="nothing to do"
  if [ ${#did[@]} -gt 0 ]; then what="${did[*]}"; fi
  echo "services: Toxiproxy $TOXIPROXY_VERSION ready at $TOXIPROXY_BIN ($what)"
}

# Starts COMMAND in its own session, detached, output to LOG; writes the
# server's pid (the one COMMAND keeps through exec) to PIDFILE.
start_detached() { # log pidfile command...
  local log=$1 pidfile=$2
  shift 2
  rm -f "$pidfile"
  # shellcheck disable=SC2016 # $$ and $@ belong to the inner shell
  setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >"$log" 2>&1 </dev/null &
}

# Like wait_for, but gives up as soon as the server started by start_detached
# has exited, and shows the end of its log either way.
wait_started() { # name seconds pidfile log command...
  local name=$1 secs=$2 pidfile=$3 log=$4 pid
  shift 4
  local end=$((SECONDS + secs))
  while [ $SECONDS -lt $end ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "services: $name exited while starting; the end of $log:" >&2
      tail -n 30 "$log" >&2
      return 1
    fi
    sleep 1
  done
  echo "services: $name did not answer within ${secs}s; the end of $log:" >&2
  tail -n 30 "$log" >&2
  return 1
}

ensure_curl() {
  command -v curl >/dev/null 2>&1 || apt_install curl || { echo "services: apt-get install curl failed" >&2; return 1; }
}

# A data directory the servers (run as this user) can write.
ensure_data_dir() { # dir
  if ! [ -d "$1" ] || ! [ -w "$1" ]; then
    as_root install -d -o "$(id -u)" -g "$(id -g)" "$1"
  fi
}

ensure_java_tools() {
  if ! command -v java >/dev/null 2>&1; then
    apt_install openjdk-17-jre-headless || { echo "services: apt-get install openjdk-17-jre-headless failed" >&2; return 1; }
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    apt_install maven || { echo "services: apt-get install maven failed" >&2; return 1; }
  fi
}

# Copies Maven artifacts with their runtime dependencies into DIR/lib, through
# a throwaway pom; DIR/version then holds the coordinates, which is what
# maven_installed compares.
MAVEN_DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

maven_installed() { # dir group:artifact:version...
  local dir=$1
  shift
  [ -d "$dir/lib" ] && [ "$(cat "$dir/version" 2>/dev/null)" = "$*" ]
}

maven_install() { # dir group:artifact:version...
  local dir=$1
  shift
  ensure_java_tools || return 1
  local tmp c g a v
  tmp=$(mktemp -d)
  {
    echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
    echo '<groupId>rdq.tools</groupId><artifactId>fetch</artifactId><version>1</version><packaging>pom</packaging>'
    echo '<dependencies>'
    for c in "$@"; do
      IFS=: read -r g a v <<<"$c"
      echo "<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
    done
    echo '</dependencies></project>'
  } >"$tmp/pom.xml"
  if ! (cd "$tmp" && mvn -B -q "$MAVEN_DEPENDENCY_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$tmp/lib" >"$tmp/mvn.log" 2>&1); then
    echo "services: mvn could not fetch $*:" >&2
    cat "$tmp/mvn.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  as_root rm -rf "$dir"
  as_root mkdir -p "$dir"
  as_root cp -r "$tmp/lib" "$dir/lib"
  echo "$*" | as_root tee "$dir/version" >/dev/null
  rm -rf "$tmp"
}

# Kafka: the broker's jars from Maven Central (no distribution archive can be
# fetched here) with a Log4j 2 binding for its SLF4J 1.7 logging (the version
# of the log4j-core that Kafka itself depends on); scripts/kafka-node.sh runs
# a node from them.
KAFKA_VERSION=4.4.0
KAFKA_HOME=/usr/local/lib/rdq-tools/kafka-$KAFKA_VERSION
KAFKA_ARTIFACTS=(
  "org.apache.kafka:kafka_2.13:$KAFKA_VERSION"
  "org.apache.kafka:kafka-server:$KAFKA_VERSION"
  "org.apache.kafka:kafka-storage:$KAFKA_VERSION"
  "org.apache.kafka:kafka-tools:$KAFKA_VERSION"
  "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"
)
KAFKA_DATA=/var/lib/rdq-kafka

kafka_installed() { maven_installed "$KAFKA_HOME" "${KAFKA_ARTIFACTS[@]}"; }
install_kafka() { maven_install "$KAFKA_HOME" "${KAFKA_ARTIFACTS[@]}"; }

ensure_kafka() {
  local did=()
  if ! kafka_installed; then
    install_kafka || return 1
    did+=("installed $KAFKA_VERSION")
  fi
  if ! port_open 127.0.0.1 9092; then
    ensure_data_dir "$KAFKA_DATA"
    start_detached "$KAFKA_DATA/stdout.log" "$KAFKA_DATA/pid" \
      bash "$_rdq_scripts/kafka-node.sh" "$KAFKA_DATA" 9092 9093
    wait_started Kafka 120 "$KAFKA_DATA/pid" "$KAFKA_DATA/stdout.log" port_open 127.0.0.1 9092 || return 1
    bash "$_rdq_scripts/kafka-node.sh" ready 127.0.0.1:9092 120 || return 1
    did+=(started)
  fi
  report Kafka "127.0.0.1:9092" "${did[@]}"
}

# NATS with JetStream, from Debian's package (whose systemd unit never runs
# here: no systemd, and apt_install refuses service starts).
NATS_DATA=/var/lib/rdq-nats

nats_ready() { # monitoring-port
  curl -sf "http://127.0.0.1:$1/healthz?js-enabled-only=true" >/dev/null &&
    # 2.9's healthz says ok without JetStream too; its jsz says "disabled".
    curl -sf "http://127.0.0.1:$1/jsz" | grep -q '"store_dir"'
}

ensure_nats() {
  local did=()
  ensure_curl || return 1
  if ! command -v nats-server >/dev/null 2>&1; then
    apt_install nats-server || { echo "services: NATS: apt-get install nats-server failed" >&2; return 1; }
    did+=(installed)
  fi
  if ! port_open 127.0.0.1 4222; then
    ensure_data_dir "$NATS_DATA"
    start_detached "$NATS_DATA/nats.log" "$NATS_DATA/pid" \
      nats-server -js -a 127.0.0.1 -p 4222 -m 8222 -sd "$NATS_DATA"
    wait_started NATS 30 "$NATS_DATA/pid" "$NATS_DATA/nats.log" nats_ready 8222 || return 1
    did+=(started)
  fi
  report NATS "127.0.0.1:4222" "${did[@]}"
}

# ElasticMQ, an SQS-compatible server, from Maven Central; scripts/elasticmq-node.sh
# runs one from these jars.
ELASTICMQ_VERSION=1.7.1
ELASTICMQ_HOME=/usr/local/lib/rdq-tools/elasticmq-$ELASTICMQ_VERSION
ELASTICMQ_ARTIFACTS=("org.elasticmq:elasticmq-server_3:$ELASTICMQ_VERSION")
ELASTICMQ_DATA=/var/lib/rdq-elasticmq

elasticmq_installed() { maven_installed "$ELASTICMQ_HOME" "${ELASTICMQ_ARTIFACTS[@]}"; }
install_elasticmq() { maven_install "$ELASTICMQ_HOME" "${ELASTICMQ_ARTIFACTS[@]}"; }

elasticmq_ready() { # port
  curl -sf -o /dev/null "http://127.0.0.1:$1/?Action=ListQueues"
}

ensure_elasticmq() {
  local did=()
  ensure_curl || return 1
  if ! elasticmq_installed; then
    install_elasticmq || return 1
    did+=("installed $ELASTICMQ_VERSION")
  fi
  if ! port_open 127.0.0.1 9324; then
    ensure_data_dir "$ELASTICMQ_DATA"
    start_detached "$ELASTICMQ_DATA/elasticmq.log" "$ELASTICMQ_DATA/pid" \
      bash "$_rdq_scripts/elasticmq-node.sh" 9324 "$ELASTICMQ_DATA"
    wait_started ElasticMQ 60 "$ELASTICMQ_DATA/pid" "$ELASTICMQ_DATA/elasticmq.log" elasticmq_ready 9324 || return 1
    did+=(started)
  fi
  report ElasticMQ "127.0.0.1:9324" "${did[@]}"
}

# The NATS command-line tool, for `nats bench` in the benchmarks only (not in
# ensure_services): built from its Go module like Toxiproxy.
NATS_CLI_VERSION=v0.5.0
NATS_CLI_BIN=/usr/local/lib/rdq-tools/nats

ensure_nats_cli() {
  local what="nothing to do" stamp="$NATS_CLI_BIN.version"
  if ! [ -x "$NATS_CLI_BIN" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$NATS_CLI_VERSION" ]; then
    local go=go
    if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
    if ! command -v "$go" >/dev/null 2>&1; then
      echo "services: the NATS CLI needs Go to build" >&2
      return 1
    fi
    local gobin
    gobin=$(mktemp -d)
    GOBIN=$gobin GOFLAGS=-mod=mod "$go" install "github.com/nats-io/natscli/nats@$NATS_CLI_VERSION" ||
      { echo "services: NATS CLI: go install failed" >&2; rm -rf "$gobin"; return 1; }
    as_root install -D -m 0755 "$gobin/nats" "$NATS_CLI_BIN"
    echo "$NATS_CLI_VERSION" | as_root tee "$stamp" >/dev/null
    rm -rf "$gobin"
    what=installed
  fi
  echo "services: NATS CLI $NATS_CLI_VERSION ready at $NATS_CLI_BIN ($what)"
}

report() { # name address did...
  local name=$1 addr=$2
  shift 2
  if [ $# -eq 0 ]; then
    echo "services: $name up on $addr (nothing to do)"
  else
    local IFS=,
    echo "services: $name up on $addr ($*)" | sed 's/,/, /g'
  fi
}

ensure_services() {
  # The embedded and in-memory stores need no service.
  ensure_postgres # rdq-store-postgres (postgres://postgres@127.0.0.1:5432/test)
  ensure_rabbitmq # rdq-store-rabbitmq (amqp://guest:guest@127.0.0.1:5672/%2f)
  ensure_redis    # redis://127.0.0.1:6379
  ensure_toxiproxy # the network-fault tests (crates/rdq-cli/tests/faults_network.rs)
  ensure_kafka     # the Kafka source (127.0.0.1:9092; scripts/kafka-node.sh for own brokers)
  ensure_nats      # the NATS JetStream source (nats://127.0.0.1:4222)
  ensure_elasticmq # the SQS source (http://127.0.0.1:9324)
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  ensure_services
fi
