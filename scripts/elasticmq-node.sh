#!/usr/bin/env bash
# An ElasticMQ server (an SQS-compatible queue server, messages in memory) on
# loopback, from the jars that scripts/services.sh installs (it installs them
# here too when they are missing, on stderr).
#
#   elasticmq-node.sh PORT [DIR]
#       Runs ElasticMQ on 127.0.0.1:PORT in the foreground until killed; its
#       configuration goes to DIR/elasticmq.conf (DIR defaults to a new
#       temporary folder). Region us-east-1, account 000000000000: queue URLs
#       are http://127.0.0.1:PORT/000000000000/NAME. Any credentials are
#       accepted. Logs on stdout.
#
# JAVA_HOME, when set, chooses the JVM (Java 17 or newer); else `java`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/services.sh
source "$here/services.sh"

case "${1:-}" in
  "" | -* | help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' >&2; exit 2 ;;
esac
port=$1
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/rdq-elasticmq.XXXXXX")}
mkdir -p "$dir"

if ! elasticmq_installed; then install_elasticmq >&2; fi

java=java
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java=$JAVA_HOME/bin/java; fi

conf="$dir/elasticmq.conf"
cat >"$conf" <<EOF
# Written by scripts/elasticmq-node.sh at each start.
# The server's own settings (HTTP limits, logging) come first.
include classpath("application.conf")

node-address {
  protocol = http
  host = "127.0.0.1"
  port = $port
  context-path = ""
}
rest-sqs {
  enabled = true
  bind-port = $port
  bind-hostname = "127.0.0.1"
  sqs-limits = strict
}
generate-node-address = false
queues-storage.enabled = false
messages-storage.enabled = false
aws {
  region = "us-east-1"
  accountId = "000000000000"
}
EOF

exec "$java" -Xmx256m -Djava.awt.headless=true -Dconfig.file="$conf" \
  -cp "$ELASTICMQ_HOME/lib/*" org.elasticmq.server.Main
