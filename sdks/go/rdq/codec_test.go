package rdq

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"rdq.dev/sdk/go/internal/rdqpb"
)

func ptr[T any](v T) *T { return &v }

// fullTask is a pushed task with every kind of field set: strings, bytes,
// a map, repeated and optional messages, enums.
func fullTask() *rdqpb.WorkResponse {
	return &rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Task{Task: &rdqpb.LeasedTask{
		Id: "01J0000000000000000000000A", LeaseToken: "lease-token",
		Envelope: &rdqpb.Envelope{
			EnvelopeVersion: 1, Id: "01J0000000000000000000000A", Queue: "payments", HandlerRef: "charge",
			HandlerVersion: ptr("v2"), Payload: []byte(`{"amount":12.50,"é":"ü"}`), PayloadContentType: "application/json",
			Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "a"},
			Status:  rdqpb.Status_IN_FLIGHT, Priority: 7, AttemptCount: 2, ClaimCount: 3,
			LeaseExpiresAt: ptr("2026-12-07T10:00:30.000Z"), CreatedAt: "2026-12-07T10:00:00.000Z",
			Attempts: []*rdqpb.AttemptRecord{
				{AttemptNo: 1, StartedAt: "2026-12-07T10:00:01.000Z", FinishedAt: ptr("2026-12-07T10:00:02.000Z"),
					Outcome: rdqpb.Outcome_RETRYABLE_FAILURE, Error: &rdqpb.ErrorInfo{Type: "net.OpError", Message: "refused"}},
				{AttemptNo: 2, StartedAt: "2026-12-07T10:00:03.000Z", Omitted: []string{"finished_at"}},
			},
			Omitted:         []string{"payload_ref"},
			UnknownJson:     `{"x":1}`,
			CancelRequested: &rdqpb.CancelRequest{At: "2026-12-07T10:00:04.000Z", By: "ops", Message: ptr("stop")},
		},
	}}}
}

// The codec reads what protobuf's own encoder writes, whole or split
// across buffers, and writes what protobuf's decoder reads back equal.
func TestVTCodecAgreesWithProtobuf(t *testing.T) {
	c := newVTCodec()
	want := fullTask()
	wire, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []mem.BufferSlice{
		{mem.SliceBuffer(wire)},
		{mem.SliceBuffer(wire[:17]), mem.SliceBuffer(wire[17:])},
	} {
		got := &rdqpb.WorkResponse{}
		if err := c.Unmarshal(data, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, want %v", got, want)
		}
	}

	settle := &rdqpb.WorkRequest{Kind: &rdqpb.WorkRequest_Settle{Settle: &rdqpb.WorkSettle{Seq: 9, Settles: []*rdqpb.SettleRequest{
		{Id: "01J0000000000000000000000A", LeaseToken: "t", Outcome: rdqpb.ReportedOutcome_REPORTED_SUCCESS},
		{Id: "01J0000000000000000000000B", LeaseToken: "u", Outcome: rdqpb.ReportedOutcome_REPORTED_DEFER, DeferMs: ptr(uint64(0))},
		{Id: "01J0000000000000000000000C", LeaseToken: "v", Outcome: rdqpb.ReportedOutcome_REPORTED_RETRYABLE_FAILURE,
			Error: &rdqpb.ReportedError{Type: "os.PathError", Message: "open x: no such file", DetailJson: ptr(`{"k":"v"}`)}},
	}}}}
	for _, m := range []proto.Message{settle, want} {
		out, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(out.Materialize(), back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(back, m) {
			t.Fatalf("encoded %v, read back %v", m, back)
		}
	}
}

// A message without generated code goes through gRPC's own codec; bytes
// that are not a message are an error, never a panic.
func TestVTCodecFallbackAndBadInput(t *testing.T) {
	c := newVTCodec()
	out, err := c.Marshal(wrapperspb.String("hello"))
	if err != nil {
		t.Fatal(err)
	}
	got := &wrapperspb.StringValue{}
	if err := c.Unmarshal(out, got); err != nil || got.GetValue() != "hello" {
		t.Fatalf("fallback round trip: %v, %v", got, err)
	}
	wire, _ := proto.Marshal(fullTask())
	for _, bad := range [][]byte{{0xff}, {0x0a, 0x7f, 0x01}, wire[:len(wire)-3]} {
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bad)}, &rdqpb.WorkResponse{}); err == nil {
			t.Fatalf("%x: decoded without an error", bad)
		}
	}
}
