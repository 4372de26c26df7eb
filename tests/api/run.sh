#!/usr/bin/env bash
# The schema-driven fuzzer against the live server (docs/testing.md):
# schemathesis, every check, generated from docs/openapi.json as the server
# serves it, once on an open server (no tokens) and once with tokens (an
# admin token sent as a header). Each run starts `rdq serve` on a free
# loopback port over a fresh temporary embedded store. Exits non-zero on any
# failure.
#
#   RDQ_BIN                      the rdq binary (default: built here)
#   RDQ_API_FUZZ_MAX_EXAMPLES    cases per operation and phase (default 25)
#   RDQ_API_FUZZ_MAX_TIME        seconds per run, both runs (default 90)
#   RDQ_API_FUZZ_PHASES          default examples,coverage,fuzzing,stateful
#   RDQ_API_FUZZ_SEED            the seed (default: a fixed one, so that a run is
#                                reproducible; "random" for a fresh seed, printed)
#   RDQ_API_FUZZ_WORKERS         concurrent schemathesis workers (default 1:
#                                with more, CPython 3.11 can fail parsing in
#                                threads: "AST constructor recursion depth mismatch")
#   RDQ_API_FUZZ_MODES           which runs: "open secured" (default)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/tests/api"
cd "$root"

max_examples="${RDQ_API_FUZZ_MAX_EXAMPLES:-25}"
max_time="${RDQ_API_FUZZ_MAX_TIME:-90}"
phases="${RDQ_API_FUZZ_PHASES:-examples,coverage,fuzzing,stateful}"
workers="${RDQ_API_FUZZ_WORKERS:-1}"
modes="${RDQ_API_FUZZ_MODES:-open secured}"
# A fixed seed by default: the suite's verdict is the same on every run of
# the same commit; exploratory runs take a fresh one (docs/testing.md).
seed="${RDQ_API_FUZZ_SEED:-20261201}"

log() { echo "api: $*"; }

# --- the virtualenv: created once, reinstalled when requirements.txt changes
venv="$root/target/api-venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
# A venv copied or moved from elsewhere has scripts pointing at its old path.
if [ -d "$venv" ] && ! "$venv/bin/pip" --version >/dev/null 2>&1; then
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  log "installing tests/api/requirements.txt"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  echo "$want" >"$stamp"
fi

# --- the binary
if [ -z "${RDQ_BIN:-}" ]; then
  log "building rdq (cargo build --workspace --bin rdq)"
  cargo build --quiet --workspace --bin rdq
  RDQ_BIN="$root/target/debug/rdq"
fi
[ -x "$RDQ_BIN" ] || { echo "api: RDQ_BIN=$RDQ_BIN is not executable" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/rdq-api-fuzz.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Starts `rdq serve` with config file $1 and data directory $2; sets $base.
start_server() {
  local config="$1" data="$2" port
  port="$(free_port)"
  base="http://127.0.0.1:$port"
  "$RDQ_BIN" serve --listen "127.0.0.1:$port" --store "$data" --config "$config" \
    --log warn >"$data.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do
    if "$venv/bin/python" - "$base/readyz" <<'PY' 2>/dev/null; then return 0; fi
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=1).read()
PY
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "api: rdq serve did not become ready; its log:" >&2
  cat "$data.log" >&2 || true
  exit 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

status=0
for mode in $modes; do
  dir="$work/$mode"
  mkdir -p "$dir"
  args=()
  case "$mode" in
    open)
      : >"$dir/rdq.toml"
      # No tokens: the server answers without authentication by design
      # (loopback only), which is what ignored_auth would flag, and the
      # Authorization header is no parameter to vary.
      args+=(--exclude-checks ignored_auth --generation-with-security-parameters false)
      ;;
    secured)
      token="fuzz-admin-$("$venv/bin/python" -c 'import secrets; print(secrets.token_hex(16))')"
      cat >"$dir/rdq.toml" <<EOF
public_metrics = false
[[tokens]]
name = "fuzz-admin"
token = "$token"
scopes = ["admin"]
EOF
      args+=(--header "Authorization: Bearer $token")
      ;;
    *) echo "api: unknown mode $mode (open, secured)" >&2; exit 2 ;;
  esac
  if [ "$seed" != random ]; then args+=(--seed "$seed"); fi
  start_server "$dir/rdq.toml" "$dir/data"
  log "== $mode: schemathesis against $base (max $max_examples cases per operation, ${max_time}s) =="
  started=$(date +%s)
  set +e
  (
    cd "$dir"
    PYTHONPATH="$here" SCHEMATHESIS_HOOKS=hooks \
      "$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" --no-color \
      run "$base/openapi.json" \
      --url "$base" \
      --checks all \
      --phases "$phases" \
      --max-examples "$max_examples" \
      --max-time "$max_time" \
      --workers "$workers" \
      --request-timeout 10 \
      --generation-database none \
      --wait-for-schema 30 \
      --report junit --report-dir "$root/target/api-fuzz/$mode" \
      "${args[@]}"
  )
  rc=$?
  set -e
  log "$mode: schemathesis exited $rc after $(($(date +%s) - started))s"
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "api: rdq serve died during the $mode run; its log:" >&2
    cat "$dir/data.log" >&2 || true
    rc=1
  fi
  stop_server
  [ "$rc" -eq 0 ] || status=1
done
exit "$status"
