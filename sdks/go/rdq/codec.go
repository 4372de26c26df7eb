package rdq

// The client's gRPC codec: protobuf's wire format, as gRPC's default
// "proto" codec writes and reads it, through the marshal and unmarshal code
// protoc-gen-go-vtproto generates for rdq's messages (internal/rdqpb, see
// gen.sh). That code walks each message's fields directly instead of
// protobuf's reflection tables: on a busy Work stream, decoding the tasks
// pushed to a worker was about a quarter of the worker's CPU. Set on the
// client's own connection only (never registered globally, so other gRPC
// clients in the process keep theirs); a message without generated code
// goes through gRPC's own codec.

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	// Registers gRPC's "proto" codec, the fallback.
	_ "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtMessage is what protoc-gen-go-vtproto generates for each message.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
}

type vtCodec struct {
	fallback encoding.CodecV2
}

func newVTCodec() vtCodec {
	return vtCodec{fallback: encoding.GetCodecV2("proto")}
}

// Name is gRPC's default codec's, "proto": forced on the connection, it
// makes the requests' content type application/grpc+proto, which a gRPC
// server reads as protobuf, as it does application/grpc.
func (vtCodec) Name() string { return "proto" }

func (c vtCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	buf := make([]byte, m.SizeVT())
	n, err := m.MarshalToSizedBufferVT(buf)
	if err != nil {
		return nil, fmt.Errorf("rdq: encoding %T: %w", v, err)
	}
	return mem.BufferSlice{mem.SliceBuffer(buf[len(buf)-n:])}, nil
}

// Unmarshal decodes into v, a new message (gRPC's stubs make one per
// message). The generated code copies what it keeps, so the buffers go
// back to gRPC's pool afterwards.
func (c vtCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return m.UnmarshalVT(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.UnmarshalVT(buf.ReadOnlyData())
}
