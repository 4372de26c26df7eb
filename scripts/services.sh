#!/usr/bin/env bash
# Installs, configures and starts the local services the store tests talk to,
# idempotently, without systemd. See docs/testing.md for what it changes.
#
#   PostgreSQL  127.0.0.1:5432  trust auth for `postgres` from 127.0.0.1, database `test`
#   RabbitMQ    127.0.0.1:5672  guest/guest (the broker's default, loopback only)
#   Redis       127.0.0.1:6379  no persistence
#   Toxiproxy   /usr/local/lib/rdq-tools/toxiproxy-server (each network-fault test starts its own)
#
# Nothing listens beyond loopback. Sourced by scripts/test.sh (which calls
# `ensure_services`), or run directly: `bash scripts/services.sh`.
# Each service prints one line saying what was done.

_apt_updated=""

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
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  ensure_services
fi
