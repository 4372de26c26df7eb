#!/usr/bin/env bash
# Runs rdq's whole test suite, every language: installs and starts the local
# services the store tests need (scripts/services.sh), then each suite.
#
#   bash scripts/test.sh              # everything
#   bash scripts/test.sh rust go      # only the named suites
#
# Suites: rust, go (sdks/go), java (sdks/java), web (the dashboard's browser
# tests), grpc (a Python grpcio client against `rdq serve`), api (the
# schema-driven fuzzer against `rdq serve`). A suite whose
# sources are in the tree but whose toolchain is missing fails with a message
# saying what to install; none is skipped silently.
#
# Long-running variants are opt-in through environment variables
# (docs/testing.md): RDQ_CRASH_ITERATIONS, PROPTEST_CASES, RDQ_FUZZ_SECONDS.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# shellcheck source=scripts/services.sh
source scripts/services.sh

need() { # command what-to-install
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "test.sh: '$1' is missing: $2" >&2
    exit 1
  fi
}

# The rdq binary the other languages' tests start (`rdq serve`).
build_rdq() {
  if [ -z "${RDQ_BIN:-}" ]; then
    cargo build --quiet --workspace --bin rdq
    export RDQ_BIN="$root/target/debug/rdq"
  fi
}

suite_rust() {
  need cargo "Rust via rustup (the toolchain is pinned in rust-toolchain.toml)"
  need cargo-nextest "cargo install --locked cargo-nextest"
  local profile=default
  if [ "${CI:-}" = "true" ]; then profile=ci; fi
  cargo test --workspace --doc --quiet
  cargo nextest run --workspace --no-fail-fast --profile "$profile"
  # The tests that restart a shared service (the broker, the database) run
  # last and one at a time, when nothing else needs the service.
  # `--workspace` keeps the feature set of the main run: selecting one
  # package (`-p`) would unify features differently and rebuild every
  # dependency a second time.
  cargo nextest run --workspace --profile "$profile" --run-ignored only \
    -E 'binary_id(rdq-store-rabbitmq::reconnect)'
  cargo nextest run --workspace --profile "$profile" --run-ignored only \
    -E 'binary_id(rdq-store-postgres::db_restart)'
  ensure_services
}

suite_go() {
  [ -d sdks/go ] || return 0
  need go "Go 1.22 or newer (https://go.dev/dl or Debian's golang package)"
  build_rdq
  (
    cd sdks/go
    unformatted=$(gofmt -l .)
    if [ -n "$unformatted" ]; then
      echo "test.sh: gofmt would change: $unformatted" >&2
      exit 1
    fi
    go vet ./...
    go test -race -count=1 ./...
  )
}

suite_java() {
  [ -d sdks/java ] || return 0
  need java "a Java 17 JDK (Debian's openjdk-17-jdk)"
  need mvn "Maven (Debian's maven package)"
  build_rdq
  (cd sdks/java && mvn -q -B verify)
}

suite_web() {
  [ -f web/package.json ] || return 0
  need node "Node.js 20 (Debian's nodejs package)"
  need npm "npm (Debian's npm package)"
  if [ ! -x /usr/bin/chromium ]; then
    apt_install chromium || { echo "test.sh: Chromium is missing: apt-get install chromium" >&2; exit 1; }
  fi
  build_rdq
  (cd web && npm ci --no-audit --no-fund --silent && npm test)
}

suite_grpc() {
  [ -f tests/grpc/requirements.txt ] || return 0
  need python3 "Python 3.11 with pip and venv (Debian's python3-venv)"
  build_rdq
  bash tests/grpc/run.sh
}

suite_api() {
  [ -f tests/api/requirements.txt ] || return 0
  need python3 "Python 3.11 with pip"
  build_rdq
  bash tests/api/run.sh
}

suites=("$@")
if [ ${#suites[@]} -eq 0 ]; then suites=(rust go java web grpc api); fi

ensure_services
for s in "${suites[@]}"; do
  case "$s" in
    rust | go | java | web | grpc | api) echo "test.sh: == $s ==" && "suite_$s" ;;
    *)
      echo "test.sh: unknown suite '$s' (rust, go, java, web, grpc, api)" >&2
      exit 2
      ;;
  esac
done
