package rdq

// Cancelling a running task: the server tells the worker holding its lease
// (a WorkCancel on the Work stream, or the cancel_requested of a lease
// extension's answer), and the worker cancels the handler's context with a
// *CancelledError as the cause. A handler that then succeeds keeps its
// success; any other outcome is reported as a failure of type
// rdq.Cancelled, and the server ends the task DEAD with reason CANCELLED
// (docs/outcomes.md).

import (
	"context"
	"errors"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
)

// ErrCancelled is what errors.Is finds in a *CancelledError: the task was
// cancelled while its handler ran.
var ErrCancelled = errors.New("rdq: the task was cancelled")

// CancelledErrorType is the error_type recorded for a handler stopped by a
// cancel.
const CancelledErrorType = "rdq.Cancelled"

// CancelledError is the cause (context.Cause) of a handler context
// cancelled because a cancel was asked of its task: who asked, when, and
// why. errors.Is(err, ErrCancelled) and errors.Is(err, context.Canceled)
// hold for it.
type CancelledError struct {
	// By is who asked (the principal's name).
	By string
	// At is when the cancel was asked (the server's clock); zero when the
	// worker could not learn it.
	At time.Time
	// Message is why, as the canceller wrote it ("" when none).
	Message string
}

// Error is "cancelled by <by>: <message>" ("no reason given" without a
// message), the message a cancelled failure is recorded with, as in every
// SDK; "cancelled" when who asked is not known.
func (e *CancelledError) Error() string {
	switch {
	case e.By == "" && e.Message == "":
		return "cancelled"
	case e.By == "":
		return "cancelled: " + e.Message
	case e.Message == "":
		return "cancelled by " + e.By + ": no reason given"
	}
	return "cancelled by " + e.By + ": " + e.Message
}

// Is reports true for ErrCancelled and context.Canceled.
func (e *CancelledError) Is(target error) bool {
	return target == ErrCancelled || target == context.Canceled
}

// CancelRequested reports whether ctx (a handler's context, or one derived
// from it) was cancelled because a cancel was asked of the task, and by
// whom. A handler may poll it, or wait on ctx.Done() and then ask.
func CancelRequested(ctx context.Context) (*CancelledError, bool) {
	if ctx == nil || ctx.Err() == nil {
		// Not cancelled at all (the common case, checked after every
		// handler): no cause to look into.
		return nil, false
	}
	var ce *CancelledError
	if !errors.As(context.Cause(ctx), &ce) {
		return nil, false
	}
	return ce, true
}

// cancelledOutcome is what a handler stopped by a cancel is reported as.
func cancelledOutcome(ce *CancelledError) Outcome {
	return PermanentFailure(ce).WithType(CancelledErrorType)
}

// cancelledFromRequest is the CancelledError of an envelope's cancel request.
func cancelledFromRequest(r *envelope.CancelRequest) *CancelledError {
	ce := &CancelledError{By: r.By, At: r.At}
	if r.Message != nil {
		ce.Message = *r.Message
	}
	return ce
}

// cancelledFromProto is the CancelledError of a WorkCancel's request; one
// that does not map onto a valid request still cancels, with what it has.
func cancelledFromProto(p *rdqpb.CancelRequest) *CancelledError {
	if r, err := cancelRequestFromProto(p); err == nil {
		return cancelledFromRequest(r)
	}
	ce := &CancelledError{By: p.GetBy(), Message: p.GetMessage()}
	if at, ok := envelope.ParseTimestamp(p.GetAt()); ok {
		ce.At = at
	}
	return ce
}

// cancelRun stops the run of task id under lease token (any token when
// empty) because a cancel was asked of it; a task this worker no longer
// runs under that lease is left alone.
func (w *Worker) cancelRun(id, token string, ce *CancelledError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.running[id]
	if r == nil || (token != "" && r.task.LeaseToken != token) {
		return
	}
	w.cancelLocked(r, ce)
}

// cancelLocked cancels r's handler context with ce, once (w.mu held). A
// task still waiting for a handler slot is not run: its cancelled failure
// is settled at once.
func (w *Worker) cancelLocked(r *run, ce *CancelledError) {
	if r.state != stateRunning || r.cancelled != nil {
		return
	}
	r.cancelled = ce
	r.cancel(ce)
	if !r.began {
		r.state = stateDone
		if !w.closed {
			o := cancelledOutcome(ce)
			w.settleCh <- settleItem{Settle{ID: r.task.ID, LeaseToken: r.task.LeaseToken, Outcome: o.Settlement(), Error: o.settleError()}, r.from}
		}
	}
}

// cancelOfExtension is the CancelledError an extension's answer calls for,
// or nil: the request its envelope carries, or, when the answer only says
// that one was asked (a bare ack), the request read from the task itself.
func (w *Worker) cancelOfExtension(ctx context.Context, r *run, res SettleResult) *CancelledError {
	if res.Envelope.CancelRequested != nil {
		return cancelledFromRequest(res.Envelope.CancelRequested)
	}
	if !res.CancelRequested {
		return nil
	}
	w.mu.Lock()
	known := r.cancelled != nil || r.state != stateRunning
	w.mu.Unlock()
	if known { // the Work stream's WorkCancel came first, as it usually does
		return nil
	}
	if env, err := w.client.Get(ctx, r.task.ID); err == nil && env.CancelRequested != nil {
		return cancelledFromRequest(env.CancelRequested)
	}
	return &CancelledError{}
}
