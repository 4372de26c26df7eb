package rdq

// The Work stream (rdq.v1.Workers/Work, docs/grpc.md): one bidirectional
// gRPC stream on which the server pushes leased tasks while the worker has
// credits, and the worker sends its settles and lease extensions, each
// answered by an ack carrying the same seq. A workStream is one such
// stream; the Worker decides what to do with what arrives on it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"rdq.dev/sdk/go/internal/rdqpb"
)

// maxMessageBytes bounds one gRPC message each way: a task with the largest
// payload a server may be configured for, with room to spare.
const maxMessageBytes = 64 << 20

// conn is the client's gRPC connection, made on first use. It connects
// lazily, so making it needs no server.
func (c *Client) conn() (*grpc.ClientConn, error) {
	c.grpcMu.Lock()
	defer c.grpcMu.Unlock()
	if c.grpcConn != nil {
		return c.grpcConn, nil
	}
	creds := insecure.NewCredentials()
	if c.grpcTLS != nil {
		creds = credentials.NewTLS(c.grpcTLS)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent(c.ua),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes),
			grpc.ForceCodecV2(newVTCodec())),
	}, c.grpcOpts...)
	conn, err := grpc.NewClient(c.grpcTarget, opts...)
	if err != nil {
		return nil, fmt.Errorf("rdq: the gRPC connection to %s: %w", c.grpcTarget, err)
	}
	c.grpcConn = conn
	return conn, nil
}

// outgoing carries the bearer token as the server expects it on gRPC.
func (c *Client) outgoing(ctx context.Context) context.Context {
	if c.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
}

// errStreamClosed: the stream takes no more messages (closed for shutdown,
// or broken); the caller goes over HTTP instead.
var errStreamClosed = errors.New("rdq: the Work stream is closed")

// streamHandler is what a workStream hands over: each leased task as it
// arrives. A task whose envelope does not map onto a valid one comes with
// err set.
type streamHandler func(s *workStream, task ClaimedTask, err error)

// cancelHandler is told of each WorkCancel: a cancel was asked of a task
// the stream handed out.
type cancelHandler func(id, leaseToken string, ce *CancelledError)

// ackFunc receives the results of one settle or extension, or the error
// that ended the stream before its ack arrived.
type ackFunc func(results []SettleResult, err error)

type workStream struct {
	stream grpc.BidiStreamingClient[rdqpb.WorkRequest, rdqpb.WorkResponse]
	cancel context.CancelFunc

	// sendMu serialises sends (a gRPC stream takes one sender at a time)
	// and guards closed, so that nothing is sent after CloseSend.
	sendMu sync.Mutex
	closed bool

	mu   sync.Mutex // guards seq and acks
	seq  uint64
	acks map[uint64]ackFunc

	done chan struct{} // closed when the receiving loop has ended
	err  error         // why it ended (nil: the server ended the stream); read after done
	// opened: the server answered the stream (its headers, or a message),
	// so a later failure is a broken stream, not one the server refused.
	opened atomic.Bool
	// capacity is the worker's capacity (handlers and prefetch) the stream
	// has credits for: its level when opened, raised by growStreamCredits.
	capacity atomic.Int64
}

// openWorkStream opens a Work stream and sends its hello. A refused hello,
// or a server without the RPC, ends the stream with that status (s.err),
// before it is opened. Nothing is read from it before start.
func (c *Client) openWorkStream(queues []string, credits int, lease time.Duration, bareAcks bool) (*workStream, error) {
	conn, err := c.conn()
	if err != nil {
		return nil, err
	}
	// The stream outlives any one request: it ends by CloseSend, or cancel.
	ctx, cancel := context.WithCancel(c.outgoing(context.Background()))
	stream, err := rdqpb.NewWorkersClient(conn).Work(ctx)
	if err != nil {
		cancel()
		return nil, statusError("opening the Work stream", err)
	}
	hello := &rdqpb.WorkHello{Queues: queues, Credits: uint32(min(max(credits, 1), 10000)), BareAcks: bareAcks}
	if lease > 0 {
		ms := uint64(max(lease.Milliseconds(), 1))
		hello.LeaseMs = &ms
	}
	// io.EOF: the stream has already ended; the receiving loop reads why.
	if err := stream.Send(&rdqpb.WorkRequest{Kind: &rdqpb.WorkRequest_Hello{Hello: hello}}); err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, statusError("opening the Work stream", err)
	}
	return &workStream{stream: stream, cancel: cancel, acks: map[uint64]ackFunc{}, done: make(chan struct{})}, nil
}

// start reads the stream from now on: tasks are handed to onTask, cancel
// notices to onCancel, from one goroutine, in the order they arrive.
func (s *workStream) start(onTask streamHandler, onCancel cancelHandler) {
	go s.receive(onTask, onCancel)
}

// receive reads the stream until it ends: tasks go to onTask, acks to
// whoever waits for their seq. It then fails the acks still awaited.
func (s *workStream) receive(onTask streamHandler, onCancel cancelHandler) {
	// Headers come before any message, or not at all when the stream is
	// refused (then Recv reports why).
	if md, err := s.stream.Header(); err == nil && md != nil {
		s.opened.Store(true)
	}
	var err error
	for {
		var msg *rdqpb.WorkResponse
		msg, err = s.stream.Recv()
		if err != nil {
			break
		}
		s.opened.Store(true)
		switch kind := msg.GetKind().(type) {
		case *rdqpb.WorkResponse_Task:
			t := kind.Task
			env, err := envelopeFromProto(t.GetEnvelope())
			onTask(s, ClaimedTask{ID: t.GetId(), LeaseToken: t.GetLeaseToken(), Envelope: env}, err)
		case *rdqpb.WorkResponse_Ack:
			s.mu.Lock()
			ack := s.acks[kind.Ack.GetSeq()]
			delete(s.acks, kind.Ack.GetSeq())
			s.mu.Unlock()
			if ack != nil {
				results := make([]SettleResult, len(kind.Ack.GetResults()))
				for i, r := range kind.Ack.GetResults() {
					results[i] = settleResultFromProto(r)
				}
				ack(results, nil)
			}
		case *rdqpb.WorkResponse_Cancel:
			if c := kind.Cancel; c.GetId() != "" {
				onCancel(c.GetId(), c.GetLeaseToken(), cancelledFromProto(c.GetRequest()))
			}
		default:
			// A kind this SDK does not know (the server may add kinds):
			// skipped, so a newer server never breaks an older worker.
		}
	}
	switch {
	case errors.Is(err, io.EOF) && s.opened.Load():
		err = nil
	case errors.Is(err, io.EOF):
		err = errors.New("rdq: the server ended the Work stream without answering it")
	default:
		err = statusError("the Work stream", err)
	}
	s.sendMu.Lock()
	s.closed = true
	s.sendMu.Unlock()
	s.mu.Lock()
	pending := s.acks
	s.acks = nil
	s.mu.Unlock()
	lost := err
	if lost == nil {
		lost = errors.New("rdq: the Work stream ended before the ack")
	}
	for _, ack := range pending {
		ack(nil, lost)
	}
	s.err = err
	s.cancel()
	close(s.done)
}

// send sends one message; with ack set, it is called with the message's
// results (or the error that ended the stream first). errStreamClosed when
// the stream takes no more messages: then ack is never called.
func (s *workStream) send(req *rdqpb.WorkRequest, seq uint64, ack ackFunc) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.closed {
		return errStreamClosed
	}
	if ack != nil {
		s.mu.Lock()
		if s.acks == nil { // the receiving loop has ended
			s.mu.Unlock()
			return errStreamClosed
		}
		s.acks[seq] = ack
		s.mu.Unlock()
	}
	if err := s.stream.Send(req); err != nil {
		// The stream is broken; the receiving loop learns why.
		s.closed = true
		if ack != nil {
			s.mu.Lock()
			_, mine := s.acks[seq]
			delete(s.acks, seq)
			s.mu.Unlock()
			if !mine {
				return nil // the receiving loop has failed it: ack is called
			}
		}
		return errStreamClosed
	}
	return nil
}

func (s *workStream) nextSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// settle sends one WorkSettle of up to 1000 settles; ack gets the results.
func (s *workStream) settle(batch []Settle, ack ackFunc) error {
	items := make([]*rdqpb.SettleRequest, len(batch))
	for i, b := range batch {
		items[i] = settleToProto(b)
	}
	seq := s.nextSeq()
	return s.send(&rdqpb.WorkRequest{Kind: &rdqpb.WorkRequest_Settle{Settle: &rdqpb.WorkSettle{Seq: seq, Settles: items}}}, seq, ack)
}

// extend extends one lease to extend from now and waits for its ack (its
// one result), or for ctx. errStreamClosed when the stream takes no more
// messages.
func (s *workStream) extend(ctx context.Context, id, leaseToken string, extend time.Duration) (SettleResult, error) {
	seq := s.nextSeq()
	type answered struct {
		res SettleResult
		err error
	}
	answer := make(chan answered, 1)
	req := &rdqpb.WorkRequest{Kind: &rdqpb.WorkRequest_Extend{Extend: &rdqpb.WorkExtend{Seq: seq, Extend: &rdqpb.ExtendLeaseRequest{
		Id: id, LeaseToken: leaseToken, ExtendMs: uint64(max(extend.Milliseconds(), 1)),
	}}}}
	err := s.send(req, seq, func(results []SettleResult, err error) {
		var res SettleResult
		if err == nil && len(results) > 0 {
			res, err = results[0], results[0].Err
		}
		answer <- answered{res, err}
	})
	if err != nil {
		return SettleResult{}, err
	}
	select {
	case a := <-answer:
		return a.res, a.err
	case <-ctx.Done():
		s.mu.Lock()
		if s.acks != nil {
			delete(s.acks, seq)
		}
		s.mu.Unlock()
		return SettleResult{}, ctx.Err()
	}
}

// closeSend half-closes the stream: the server hands out nothing more, and
// ends the stream once it has answered the acks still due.
func (s *workStream) closeSend() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if !s.closed {
		s.closed = true
		_ = s.stream.CloseSend()
	}
}

// credit gives the server n more credits.
func (s *workStream) credit(n int) error {
	return s.send(&rdqpb.WorkRequest{Kind: &rdqpb.WorkRequest_Credit{Credit: &rdqpb.WorkCredit{Credits: uint32(n)}}}, 0, nil)
}

// close half-closes the stream, so the server hands out nothing more, and
// waits until it has answered every ack still due and ended the stream
// (or until wait passes; then it is cut). Later sends are errStreamClosed.
func (s *workStream) close(wait time.Duration) {
	s.closeSend()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.cancel()
		<-s.done
	}
}
