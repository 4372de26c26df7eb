#!/usr/bin/env bash
# The Python grpcio client test of rdq's gRPC API (docs/grpc.md): makes a
# venv under target/, installs tests/grpc/requirements.txt from PyPI,
# generates the Python stubs from the repository's proto/rdq/v1/*.proto,
# builds the rdq binary and runs pytest against a real `rdq serve`.
# Self-contained: `bash tests/grpc/run.sh` from anywhere.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="$ROOT/target/grpc-py-venv"
STUBS="$ROOT/target/grpc-py-stubs"
# A venv copied or moved from elsewhere has scripts pointing at its old path.
if [ -d "$VENV" ] && ! "$VENV/bin/pip" --version >/dev/null 2>&1; then
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if [ ! -f "$VENV/.installed" ] || [ tests/grpc/requirements.txt -nt "$VENV/.installed" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r tests/grpc/requirements.txt
  touch "$VENV/.installed"
fi
rm -rf "$STUBS"
mkdir -p "$STUBS"
"$VENV/bin/python" -m grpc_tools.protoc -I proto \
  --python_out="$STUBS" --grpc_python_out="$STUBS" proto/rdq/v1/*.proto
cargo build --quiet --workspace --bin rdq
RDQ_BIN="$ROOT/target/debug/rdq" PYTHONPATH="$STUBS" \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/grpc "$@"
