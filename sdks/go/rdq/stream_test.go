package rdq_test

// Tests of the Work stream itself: what the worker does with what a server
// sends, how it falls back to HTTP, TLS and tokens on both transports.

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	"rdq.dev/sdk/go/internal/rdqpb"
)

// watchWork is a stream interceptor that shows the Work stream's traffic:
// sent sees each WorkRequest as it goes, acked each WorkAck before the
// worker reads it (and whether it answers an extension). Either may be nil.
func watchWork(sent func(*rdqpb.WorkRequest), acked func(ack *rdqpb.WorkAck, extension bool)) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &watchedStream{ClientStream: s, sent: sent, acked: acked, extensions: map[uint64]bool{}}, nil
	}
}

type watchedStream struct {
	grpc.ClientStream
	sent       func(*rdqpb.WorkRequest)
	acked      func(*rdqpb.WorkAck, bool)
	mu         sync.Mutex
	extensions map[uint64]bool // seqs of the extensions sent
}

func (s *watchedStream) SendMsg(m any) error {
	if req, ok := m.(*rdqpb.WorkRequest); ok {
		if x := req.GetExtend(); x != nil {
			s.mu.Lock()
			s.extensions[x.GetSeq()] = true
			s.mu.Unlock()
		}
		if s.sent != nil {
			s.sent(req)
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*rdqpb.WorkResponse); ok && err == nil && s.acked != nil {
		if ack := resp.GetAck(); ack != nil {
			s.mu.Lock()
			extension := s.extensions[ack.GetSeq()]
			s.mu.Unlock()
			s.acked(ack, extension)
		}
	}
	return err
}
