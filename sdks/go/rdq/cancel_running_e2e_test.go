package rdq_test

// Cancelling a running task against a real server, on both transports: the
// handler's context is cancelled with a *rdq.CancelledError naming who
// asked, and the task ends DEAD with reason CANCELLED, or SUCCEEDED when
// the handler finishes all the same. Skipped on a server that cannot cancel
// running tasks (501 UNSUPPORTED).

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
	"rdq.dev/sdk/go/rdq"
)

// anonymous is who cancels on a server without tokens.
const anonymous = "anonymous"

// cancelWhileRunning runs handler on a task of its own, cancels the task
// once the handler has started, and returns the task as it ended, the
// cancel's answer and the cause the handler's context was cancelled with.
func cancelWhileRunning(t *testing.T, c *rdq.Client, tr rdq.Transport, succeed bool) (envelope.Envelope, rdq.CancelResult, error) {
	t.Helper()
	ctx := context.Background()
	q := queueName(t)
	// A short lease: over HTTP the cancel arrives with an extension.
	configure(t, c, q, map[string]any{"lease_ms": 1500})
	started, seen := make(chan struct{}, 1), make(chan error, 1)
	reg := rdq.NewRegistry()
	reg.Register("blocks", func(ctx context.Context, task envelope.Envelope) error {
		started <- struct{}{}
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		seen <- context.Cause(ctx)
		if succeed {
			return nil
		}
		return ctx.Err()
	})
	runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, Concurrency: 2})
	env := submit(t, c, rdq.Task{Queue: q, HandlerRef: "blocks"})
	receive(t, started, "the handler's start")
	res, err := c.Cancel(ctx, q, rdq.CancelRequest{IDs: []string{env.ID}, Message: "customer withdrew"})
	if rdq.IsCode(err, rdq.CodeUnsupported) {
		t.Skip("this server cannot cancel running tasks")
	}
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	var cause error
	select {
	case cause = <-seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context was never cancelled")
	}
	return waitFor(t, c, env.ID, "finished", terminal), res, cause
}

// cancelsHeard counts the WorkCancel messages a client's Work streams bring.
func cancelsHeard(n *atomic.Int32) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &countingStream{ClientStream: s, n: n}, nil
	}
}

type countingStream struct {
	grpc.ClientStream
	n *atomic.Int32
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*rdqpb.WorkResponse); ok && err == nil && resp.GetCancel() != nil {
		s.n.Add(1)
	}
	return err
}

func TestACancelledRunningTaskStopsItsHandlerAndEndsDead(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		var heard atomic.Int32
		c = newClientWith(t, rdq.ClientConfig{URL: url, GRPCDialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(cancelsHeard(&heard))}})
		final, res, cause := cancelWhileRunning(t, c, tr, false)
		// On the stream the server pushes a WorkCancel; over HTTP the
		// cancel comes with a lease extension's answer.
		want := int32(0)
		if tr == rdq.TransportGRPC {
			want = 1
		}
		if heard.Load() != want {
			t.Fatalf("%d WorkCancel messages (%s)", heard.Load(), tr)
		}
		if res.Count != 1 || !slices.Equal(res.IDs, []string{final.ID}) || !slices.Equal(res.Running, []string{final.ID}) {
			t.Fatalf("cancel answered %+v", res)
		}
		ce, ok := rdq.CancelRequested(contextWithCause(cause))
		if !ok || ce.By != anonymous || ce.Message != "customer withdrew" || ce.At.IsZero() {
			t.Fatalf("the handler saw %#v", cause)
		}
		if final.Status != envelope.StatusDead || final.DeadReason == nil ||
			final.DeadReason.Code != envelope.DeadReasonCancelled || final.DeadReason.By != anonymous {
			b, _ := final.Encode()
			t.Fatalf("the task ended %s", b)
		}
		if r := final.CancelRequested; r == nil || r.By != anonymous || !r.At.Equal(ce.At) {
			t.Fatalf("cancel_requested %+v", r)
		}
		last := final.Attempts[len(final.Attempts)-1]
		if last.Error == nil || last.Error.Type != rdq.CancelledErrorType || last.Error.Message != "cancelled by anonymous: customer withdrew" {
			t.Fatalf("the attempt's error %+v", last.Error)
		}
		if final.AttemptCount != 1 {
			t.Fatalf("attempts %d", final.AttemptCount)
		}
	})
}

func TestAHandlerThatFinishesAfterACancelLeavesTheTaskSucceeded(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		final, res, cause := cancelWhileRunning(t, c, tr, true)
		if !slices.Equal(res.Running, []string{final.ID}) {
			t.Fatalf("cancel answered %+v", res)
		}
		if _, ok := rdq.CancelRequested(contextWithCause(cause)); !ok {
			t.Fatalf("the handler saw %v", cause)
		}
		if final.Status != envelope.StatusSucceeded || final.DeadReason != nil ||
			final.CancelRequested == nil || final.CancelRequested.By != anonymous {
			b, _ := final.Encode()
			t.Fatalf("the task ended %s", b)
		}
	})
}

func TestPendingOnlyLeavesRunningTasksAlone(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		ctx := context.Background()
		q := queueName(t)
		started, release := make(chan struct{}, 1), make(chan struct{})
		reg := rdq.NewRegistry()
		reg.Register("holds", func(ctx context.Context, task envelope.Envelope) error {
			started <- struct{}{}
			<-release
			return nil
		})
		runWorker(t, c, rdq.WorkerConfig{Queues: []string{q}, Registry: reg, Concurrency: 1})
		running := submit(t, c, rdq.Task{Queue: q, HandlerRef: "holds"})
		receive(t, started, "the handler's start")
		pending := submit(t, c, rdq.Task{Queue: q, HandlerRef: "holds"})
		res, err := c.Cancel(ctx, q, rdq.CancelRequest{PendingOnly: true})
		close(release)
		if rdq.IsCode(err, rdq.CodeUnsupported) {
			t.Skip("this server cannot cancel running tasks")
		}
		if err != nil || !slices.Equal(res.IDs, []string{pending.ID}) || len(res.Running) != 0 {
			t.Fatalf("cancel: %v, %+v", err, res)
		}
		if env := waitFor(t, c, running.ID, "finished", terminal); env.Status != envelope.StatusSucceeded {
			t.Fatalf("the running task ended %s", env.Status)
		}
	})
}
