#!/usr/bin/env bash
# Runs rdq's whole test suite, every language: installs and starts the local
# services the store tests need (scripts/services.sh), then each suite.
#
#   bash scripts/test.sh              # everything
#   bash scripts/test.sh rust go      # only the named suites
#
# Suites: rust, go (sdks/go), java (sdks/java), python (sdks/python), web
# (the dashboard's browser tests), grpc (a Python grpcio client against
# `rdq serve`), api (the schema-driven fuzzer against `rdq serve`). A suite whose
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
  need go "Go 1.25 or newer (https://go.dev/dl or Debian's golang package)"
  build_rdq
  (
    cd sdks/go
    unformatted=$(gofmt -l .)
    if [ -n "$unformatted" ]; then
      echo "test.sh: gofmt would change: $unformatted" >&2
      exit 1
    fi
    go vet ./...
    go_tests
    # pg (transactional submit) is a module of its own: it brings pgx.
    cd pg
    go vet ./...
    go_tests
  )
}

# `go test -race` of every Go package. With CI=true a package whose tests
# failed runs again, up to twice; if a rerun passes, the tests that failed
# are reported FLAKY and the suite goes on (as nextest's `ci` profile does
# for Rust, docs/testing.md). A package failing every time fails the suite.
go_tests() {
  local log status=0
  log=$(mktemp)
  go test -race -count=1 ./... 2>&1 | tee "$log" || status=$?
  if [ "$status" -eq 0 ] || [ "${CI:-}" != "true" ]; then
    rm -f "$log"
    return "$status"
  fi
  local packages failed
  packages=$(sed -n 's/^FAIL\t\([^[:space:]]*\).*/\1/p' "$log" | sort -u)
  failed=$(sed -n 's/^--- FAIL: \([^[:space:]]*\).*/\1/p' "$log" | sort -u | tr '\n' ' ')
  rm -f "$log"
  [ -n "$packages" ] || return "$status"
  local package try
  for package in $packages; do
    for try in 1 2; do
      echo "test.sh: go: $package failed; running it again ($try of 2)"
      if go test -race -count=1 "$package"; then
        echo "test.sh: FLAKY (go, $package): ${failed:-no test named}"
        continue 2
      fi
    done
    return 1
  done
}

suite_java() {
  [ -d sdks/java ] || return 0
  need java "a Java 17 JDK (Debian's openjdk-17-jdk)"
  need mvn "Maven (Debian's maven package)"
  build_rdq
  # With CI=true a failed test runs again, up to twice; one that then
  # passes is reported FLAKY (docs/testing.md).
  local reruns=()
  if [ "${CI:-}" = "true" ]; then reruns=(-Dsurefire.rerunFailingTestsCount=2); fi
  (cd sdks/java && mvn -q -B verify "${reruns[@]}")
  java_flakes sdks/java/target/surefire-reports
}

# Names the tests surefire's reports in $1 record as flaky (failed, then
# passed on a rerun).
java_flakes() {
  local reports=("$1"/TEST-*.xml)
  [ -e "${reports[0]}" ] || return 0
  awk '/<testcase / { match($0, / name="[^"]*"/); name = substr($0, RSTART + 7, RLENGTH - 8)
                      match($0, / classname="[^"]*"/); class = substr($0, RSTART + 12, RLENGTH - 13) }
       /<flaky(Failure|Error)/ && !seen[class "#" name]++ { print "test.sh: FLAKY (java): " class "#" name }' \
    "${reports[@]}"
}

# The Python SDK in a venv of its own (sdks/python/.venv, pinned dev tools
# from its pyproject.toml): ruff, mypy --strict, then pytest against
# `rdq serve` on every store.
suite_python() {
  [ -f sdks/python/pyproject.toml ] || return 0
  need python3 "Python 3.11 with pip and venv (Debian's python3-venv)"
  build_rdq
  (
    cd sdks/python
    # A venv copied or moved from elsewhere has scripts pointing at its old path.
    if [ -d .venv ] && ! .venv/bin/pip --version >/dev/null 2>&1; then rm -rf .venv; fi
    if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
    if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
      .venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
      touch .venv/.installed
    fi
    .venv/bin/ruff format --check .
    .venv/bin/ruff check .
    .venv/bin/mypy
    .venv/bin/pytest -q
    # The worker starts its handlers eagerly on Python 3.12 and newer
    # (docs/sdk-python.md, "How it works"): where such an
    # interpreter is here (on PATH, or one pyenv installed), the tests run
    # under it as well.
    local newer
    newer=$(newer_python)
    if [ -n "$newer" ]; then
      echo "test.sh: the Python SDK's tests again under $("$newer" --version 2>&1)"
      if [ -d .venv-newer ] && ! .venv-newer/bin/pip --version >/dev/null 2>&1; then rm -rf .venv-newer; fi
      if [ ! -x .venv-newer/bin/python ]; then "$newer" -m venv .venv-newer; fi
      if [ ! -f .venv-newer/.installed ] || [ pyproject.toml -nt .venv-newer/.installed ]; then
        .venv-newer/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
        touch .venv-newer/.installed
      fi
      .venv-newer/bin/pytest -q -p no:cacheprovider
    fi
  )
}

# The newest Python 3.12 or later on PATH or installed by pyenv; nothing
# when there is none.
newer_python() {
  local p found=
  for p in python3.14 python3.13 python3.12; do
    if "$p" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
      command -v "$p"
      return
    fi
  done
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9].*/bin/python3; do
    if [ -x "$p" ]; then found=$p; fi
  done
  if [ -n "$found" ]; then echo "$found"; fi
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
if [ ${#suites[@]} -eq 0 ]; then suites=(rust go java python web grpc api); fi

ensure_services
for s in "${suites[@]}"; do
  case "$s" in
    rust | go | java | python | web | grpc | api) echo "test.sh: == $s ==" && "suite_$s" ;;
    *)
      echo "test.sh: unknown suite '$s' (rust, go, java, python, web, grpc, api)" >&2
      exit 2
      ;;
  esac
done
