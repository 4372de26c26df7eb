#!/usr/bin/env bash
# The graphile-worker peer for rdq's W1 (drain) benchmark, on the same
# PostgreSQL and the same workload as `rdq bench --store postgres://…`:
# 20,000 no-op jobs added with 64 addJob calls in flight, then worked with
# concurrency 64. Installs graphile-worker from npm into this folder (0.17.3,
# the newest that runs on this machine's Node.js 20), creates (and drops
# afterwards) its own schema, prints one JSON line per run. Drop rdq's schema
# before its own run the same way (`DROP SCHEMA rdq CASCADE`) where autovacuum
# is off, so both start from an empty table.
#
#   bash bench/graphile-worker/run.sh            # batching on, then off
#   DATABASE_URL=postgres://… JOBS=20000 BATCHING=on bash bench/graphile-worker/run.sh
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/graphile-worker ]; then
  npm install --no-audit --no-fund --loglevel=error >&2
fi
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
if [ -n "${BATCHING:-}" ]; then
  node drain.mjs
else
  BATCHING=on node drain.mjs
  BATCHING=off node drain.mjs
fi
