#!/usr/bin/env bash
# Regenerates the Go stubs of proto/rdq/v1 in this folder (run by
# `go generate ./...` from sdks/go, or directly). Every tool is pinned:
# protoc is Debian's protobuf-compiler, the plugins are Go modules built at
# the versions below. A different protoc refuses to run rather than write
# different code.
set -euo pipefail

PROTOC_VERSION="libprotoc 3.21.12"  # apt-get install protobuf-compiler (Debian 12)
PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# Generated (reflection-free) marshal and unmarshal code, used on the
# client's own gRPC calls (rdq/codec.go): decoding the Work stream's tasks
# with it takes a fraction of protobuf's table-driven decoder's CPU.
PROTOC_GEN_GO_VTPROTO=github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.1-0.20240319094008-0393e58bdf10

here="$(cd "$(dirname "$0")" && pwd)"
proto="$(cd "$here/../../../../proto" && pwd)"
pkg=rdq.dev/sdk/go/internal/rdqpb

if [ "$(protoc --version 2>/dev/null)" != "$PROTOC_VERSION" ]; then
  echo "gen.sh: needs protoc '$PROTOC_VERSION' (apt-get install protobuf-compiler), found '$(protoc --version 2>&1 || true)'" >&2
  exit 1
fi

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" go install "$PROTOC_GEN_GO"
GOBIN="$bin" go install "$PROTOC_GEN_GO_GRPC"
GOBIN="$bin" go install "$PROTOC_GEN_GO_VTPROTO"

# The .proto files name no go_package; the M options place them here.
maps=""
for f in api envelope handler; do
  maps="$maps,Mrdq/v1/$f.proto=$pkg"
done
maps="${maps#,}"

out="$(mktemp -d)"
trap 'rm -rf "$bin" "$out"' EXIT
PATH="$bin:$PATH" protoc -I "$proto" \
  --go_out="$out" --go_opt=paths=source_relative,"$maps" \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative,"$maps" \
  --go-vtproto_out="$out" --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size,"$maps" \
  rdq/v1/api.proto rdq/v1/envelope.proto
rm -f "$here"/*.pb.go
mv "$out"/rdq/v1/*.pb.go "$here"/
