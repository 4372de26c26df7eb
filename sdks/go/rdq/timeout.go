package rdq

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A handler's timeout is set in code, per handler, because only the process
// running the handler can stop it: the worker cancels the handler's context
// when it passes. What must hold for every worker of a queue whatever its
// language (max_attempts, backoff, the lease, which errors are retried) is
// the queue's policy on the server instead.

// WithTimeout gives the handler at most d per attempt: its context is
// cancelled when d has passed, with a *TimeoutError as the cause
// (context.Cause). A handler that then returns its context's error records
// the attempt as a *TimeoutError (error_type "*rdq.TimeoutError", retryable
// unless a classifier or the queue's non_retryable_errors say otherwise).
// The lease is kept while the handler runs, timeout or not.
func WithTimeout(d time.Duration) HandlerOption {
	return func(r *registered) { r.timeout = d }
}

// TimeoutError is an attempt cut short by its handler's timeout (WithTimeout).
// errors.Is(err, context.DeadlineExceeded) holds for it.
type TimeoutError struct {
	// Timeout is the handler's timeout.
	Timeout time.Duration
	// Err is what the handler returned once its context was cancelled (nil
	// in the context's cause).
	Err error
}

func (e *TimeoutError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("the handler did not finish within its timeout of %s", e.Timeout)
	}
	return fmt.Sprintf("the handler did not finish within its timeout of %s: %v", e.Timeout, e.Err)
}

// Is reports true for context.DeadlineExceeded. TimeoutError does not unwrap
// to Err, so that the error_type recorded is its own.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// timedOut is err, or a *TimeoutError around it when the handler's timeout
// cancelled ctx and err is that deadline (the handler gave up because of it).
func timedOut(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	var cause *TimeoutError
	if !errors.As(context.Cause(ctx), &cause) || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var already *TimeoutError
	if errors.As(err, &already) {
		return err
	}
	return &TimeoutError{Timeout: cause.Timeout, Err: err}
}
