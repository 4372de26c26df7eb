package rdq_test

// Cancelling a running task against a real server, on both transports: the
// handler's context is cancelled with a *rdq.CancelledError naming who
// asked, and the task ends DEAD with reason CANCELLED, or SUCCEEDED when
// the handler finishes all the same. Skipped on a server that cannot cancel
// running tasks (501 UNSUPPORTED).

import (
	"context"
	"slices"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
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

func TestACancelledRunningTaskStopsItsHandlerAndEndsDead(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		final, res, cause := cancelWhileRunning(t, c, tr, false)
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
