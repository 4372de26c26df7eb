#!/usr/bin/env bash
# Runs rdq's whole test suite: starts the local services the store tests need
# (when they are down), then doctests and every test of the workspace.
#
# Long-running variants are opt-in through environment variables
# (see docs/testing.md): RDQ_CRASH_ITERATIONS, PROPTEST_CASES.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/services.sh
source scripts/services.sh
ensure_services

cargo test --workspace --doc --quiet
if command -v cargo-nextest >/dev/null 2>&1; then
  profile=default
  if [ "${CI:-}" = "true" ]; then profile=ci; fi
  cargo nextest run --workspace --no-fail-fast --profile "$profile"
  # The tests that restart a shared service (the broker, the database) run
  # last and one at a time, when nothing else needs the service.
  cargo nextest run --profile "$profile" -p rdq-store-rabbitmq --test reconnect --run-ignored only
  cargo nextest run --profile "$profile" -p rdq-store-postgres --test db_restart --run-ignored only
else
  cargo test --workspace --no-fail-fast
  cargo test -p rdq-store-rabbitmq --test reconnect -- --ignored
  cargo test -p rdq-store-postgres --test db_restart -- --ignored
fi
ensure_services
