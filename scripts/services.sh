#!/usr/bin/env bash
# Checks each local service a store's tests talk to, and starts it when down.
# The commands are the ones this machine kind uses to start them.

wait_for_port() { # host port name
  for _ in $(seq 1 60); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 1
  done
  echo "services: $3 did not come up on $1:$2" >&2
  return 1
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

ensure_postgres() {
  if ! port_open 127.0.0.1 5432; then
    echo "services: starting PostgreSQL" >&2
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
    wait_for_port 127.0.0.1 5432 PostgreSQL
  fi
}

ensure_rabbitmq() {
  if ! port_open 127.0.0.1 5672; then
    echo "services: starting RabbitMQ" >&2
    rabbitmq-server -detached
    wait_for_port 127.0.0.1 5672 RabbitMQ
  fi
}

ensure_services() {
  # The embedded and in-memory stores need no service. Stores that do are
  # added here as their crates land.
  ensure_postgres # rdq-store-postgres (postgres://postgres@127.0.0.1:5432/test)
  ensure_rabbitmq # rdq-store-rabbitmq (amqp://guest:guest@127.0.0.1:5672/%2f)
}
