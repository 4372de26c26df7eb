// Package rdqpb holds the Go stubs generated from proto/rdq/v1 (messages
// and gRPC clients). The files *.pb.go are generated; do not edit them.
// gen.sh regenerates them with pinned tools (protoc from Debian's
// protobuf-compiler, protoc-gen-go and protoc-gen-go-grpc as Go modules).
package rdqpb

//go:generate ./gen.sh
