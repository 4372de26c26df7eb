package rdq

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"rdq.dev/sdk/go/envelope"
)

// Error types the SDK records itself, the same names the Rust SDK uses.
const (
	// PanicErrorType: a handler panicked (retryable, with the stack).
	PanicErrorType = "rdq.Panic"
	// MapperPanicErrorType: an OutcomeMapper panicked (retryable).
	MapperPanicErrorType = "rdq.OutcomeMapperPanic"
	// NoHandlerErrorType: no handler is registered for the task's handler_ref
	// (permanent: this worker can never run it).
	NoHandlerErrorType = "rdq.NoHandler"
)

type outcomeKind uint8

const (
	kindSuccess outcomeKind = iota
	kindRetryable
	kindPermanent
	kindFailure // unclassified: the queue's globs decide
	kindDefer
	kindRelease
)

// Outcome is the canonical result of one handler call: what an
// OutcomeMapper returns, and what the ladder resolves an error to.
type Outcome struct {
	kind      outcomeKind
	err       error
	errorType string
	detail    json.RawMessage
	delay     time.Duration
	throttle  string
}

// Success is the outcome SUCCESS.
func Success() Outcome { return Outcome{kind: kindSuccess} }

// RetryableFailure is RETRYABLE_FAILURE(err): retried with backoff until the
// queue's max_attempts.
func RetryableFailure(err error) Outcome { return Outcome{kind: kindRetryable, err: orUnknown(err)} }

// PermanentFailure is PERMANENT_FAILURE(err): dead-lettered at once.
func PermanentFailure(err error) Outcome { return Outcome{kind: kindPermanent, err: orUnknown(err)} }

// Deferred is DEFER: the task comes back after d, no attempt spent.
func Deferred(d time.Duration) Outcome { return Outcome{kind: kindDefer, delay: d} }

// Throttled is DEFER that also throttles: scope ThrottleScopeKey holds the
// task's flow key back (the whole queue for a task without one),
// ThrottleScopeQueue the whole queue, until the deferral is due, on every
// worker and node.
func Throttled(d time.Duration, scope string) Outcome {
	return Outcome{kind: kindDefer, delay: d, throttle: scope}
}

// WithType sets the error_type recorded (otherwise %T of the innermost error).
func (o Outcome) WithType(name string) Outcome { o.errorType = name; return o }

// WithDetail attaches structured JSON recorded as the error's detail.
func (o Outcome) WithDetail(detail json.RawMessage) Outcome { o.detail = detail; return o }

// Settlement is the outcome name sent to the server (SUCCESS, FAILURE, …).
func (o Outcome) Settlement() string {
	switch o.kind {
	case kindSuccess:
		return SettleSuccess
	case kindRetryable:
		return SettleRetryableFailure
	case kindPermanent:
		return SettlePermanentFailure
	case kindDefer:
		return SettleDefer
	case kindRelease:
		return SettleRelease
	default:
		return SettleFailure
	}
}

// Err is the failure, or nil.
func (o Outcome) Err() error { return o.err }

// ErrorType is the error_type that will be recorded ("" without an error).
func (o Outcome) ErrorType() string {
	if o.err == nil {
		return ""
	}
	if o.errorType != "" {
		return o.errorType
	}
	return ErrorType(o.err)
}

// Delay is a deferral's delay.
func (o Outcome) Delay() time.Duration { return o.delay }

// Throttle is what a deferral throttles: ThrottleScopeKey, ThrottleScopeQueue or "".
func (o Outcome) Throttle() string { return o.throttle }

func orUnknown(err error) error {
	if err == nil {
		return errors.New("failure reported without an error")
	}
	return err
}

// OutcomeMapper decides the outcome of a call from its return value and its
// error. When registered it is authoritative: nothing below it on the ladder
// runs. It also supplies the error recorded, so a handler that reports
// failure through its return value still leaves a meaningful DLQ entry.
type OutcomeMapper func(ret any, err error) Outcome

// forced is what Permanent and Retryable wrap an error in.
type forced struct {
	err       error
	permanent bool
	name      string
}

func (f *forced) Error() string { return f.err.Error() }
func (f *forced) Unwrap() error { return f.err }

// Permanent marks err as a permanent failure for this call: straight to the
// DLQ, whatever the classifiers and the queue's globs say. nil stays nil.
func Permanent(err error) error { return force(err, true, "") }

// Retryable marks err as a retryable failure for this call. nil stays nil.
func Retryable(err error) error { return force(err, false, "") }

// PermanentAs is Permanent recording errorType as the error_type.
func PermanentAs(errorType string, err error) error { return force(err, true, errorType) }

// RetryableAs is Retryable recording errorType as the error_type.
func RetryableAs(errorType string, err error) error { return force(err, false, errorType) }

func force(err error, permanent bool, name string) error {
	if err == nil {
		return nil
	}
	return &forced{err: err, permanent: permanent, name: name}
}

// deferral is what Defer, Throttle and ThrottleQueue return.
type deferral struct {
	d        time.Duration
	throttle string
}

func (d *deferral) Error() string {
	if d.throttle != "" {
		return fmt.Sprintf("throttled (%s) for %s", d.throttle, d.d)
	}
	return fmt.Sprintf("deferred for %s", d.d)
}

// Defer, returned by a handler, puts the task back for d without spending an
// attempt (outcome DEFER). A deferred task comes back at the queue's
// max_priority, ahead of the backlog.
func Defer(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &deferral{d: d}
}

// Throttle, returned by a handler that met back-pressure (an upstream's 429,
// a tenant's quota), defers the task for d like Defer and also throttles its
// flow key until then, on every worker and node: no task with that key is
// claimed before d has passed. A task without a flow key throttles its whole
// queue. The queue's store must keep flow limits (claim_flow); on one that
// cannot the settle is refused with UNSUPPORTED and the lease runs out.
func Throttle(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &deferral{d: d, throttle: ThrottleScopeKey}
}

// ThrottleQueue is Throttle for the whole queue: no task of the queue is
// claimed before d has passed.
func ThrottleQueue(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &deferral{d: d, throttle: ThrottleScopeQueue}
}

// Classifier is a worker-level rule deciding retryable vs permanent for
// errors that match a sentinel (errors.Is) or a type (errors.As). The first
// matching classifier, in the order configured, decides.
type Classifier struct {
	match     func(error) bool
	permanent bool
	name      string
}

// Named makes the classifier record name as the error_type of what it matches.
func (c Classifier) Named(name string) Classifier { c.name = name; return c }

// PermanentIs classifies errors for which errors.Is(err, target) as permanent.
func PermanentIs(target error) Classifier {
	return Classifier{match: func(err error) bool { return errors.Is(err, target) }, permanent: true}
}

// RetryableIs classifies errors for which errors.Is(err, target) as retryable.
func RetryableIs(target error) Classifier {
	return Classifier{match: func(err error) bool { return errors.Is(err, target) }}
}

// PermanentType classifies errors with an E in their chain (errors.As) as
// permanent, e.g. rdq.PermanentType[*json.SyntaxError]().
func PermanentType[E error]() Classifier {
	return Classifier{match: func(err error) bool { var e E; return errors.As(err, &e) }, permanent: true}
}

// RetryableType classifies errors with an E in their chain as retryable,
// e.g. rdq.RetryableType[*net.OpError]().
func RetryableType[E error]() Classifier {
	return Classifier{match: func(err error) bool { var e E; return errors.As(err, &e) }}
}

// Resolve runs the outcome ladder for one call's result:
//
//  1. a mapper, when given, is authoritative and sees ret and err;
//  2. err == nil is SUCCESS;
//  3. Defer(d) is DEFER, and so are Throttle(d) and ThrottleQueue(d), which
//     also throttle; Permanent/Retryable (outermost wins) force the decision;
//  4. the classifiers, in order (errors.Is / errors.As);
//  5. otherwise FAILURE: the server applies the queue's non_retryable_errors
//     globs to error_type, and a failure no glob matches is retryable.
//
// The error_type is the wrapper's or classifier's name when given, otherwise
// the %T of the innermost error (see ErrorType).
func Resolve(ret any, err error, mapper OutcomeMapper, classifiers []Classifier) Outcome {
	if mapper != nil {
		return mapper(ret, err)
	}
	if err == nil {
		return Success()
	}
	// Whichever of a deferral and a forcing wrapper is outermost wins.
	for e := err; e != nil; e = firstCause(e) {
		switch x := e.(type) {
		case *deferral:
			return Throttled(x.d, x.throttle)
		case *forced:
			o := Outcome{kind: kindRetryable, err: err, errorType: x.name}
			if x.permanent {
				o.kind = kindPermanent
			}
			return o
		}
	}
	for _, c := range classifiers {
		if c.match != nil && c.match(err) {
			o := Outcome{kind: kindRetryable, err: err, errorType: c.name}
			if c.permanent {
				o.kind = kindPermanent
			}
			return o
		}
	}
	return Outcome{kind: kindFailure, err: err}
}

// firstCause unwraps one level; of several causes (errors.Join, fmt.Errorf
// with several %w) it takes the first.
func firstCause(err error) error {
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return u.Unwrap()
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil {
				return e
			}
		}
	}
	return nil
}

// Innermost follows the chain of causes to its end, taking the first cause
// wherever there are several.
func Innermost(err error) error {
	for {
		next := firstCause(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// ErrorType is the error_type recorded for err with no wrapper or classifier
// name: the wrapper's name if a PermanentAs/RetryableAs is in the chain,
// otherwise %T of the innermost error, so fmt.Errorf("…: %w", cause) reports
// cause's type. For errors.Join and other multi-cause errors the first cause
// is followed.
func ErrorType(err error) string {
	for e := err; e != nil; e = firstCause(e) {
		if f, ok := e.(*forced); ok && f.name != "" {
			return f.name
		}
	}
	return fmt.Sprintf("%T", Innermost(err))
}

// errorStack lets an error supply the stack recorded with it.
type errorStack interface{ Stack() string }

// settleError builds the recorded error of an outcome: message cut to 4 KiB
// and stack to 64 KiB by the envelope's rules.
func (o Outcome) settleError() *SettleError {
	if o.err == nil {
		return nil
	}
	e := &SettleError{
		Type:    o.ErrorType(),
		Message: envelope.TruncateMessage(o.err.Error()),
		Detail:  o.detail,
	}
	var st errorStack
	if errors.As(o.err, &st) {
		e.Stack = envelope.TruncateStack(st.Stack())
	}
	return e
}

// PanicError is the error a handler's panic is recorded as.
type PanicError struct {
	Value any
	stack string
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Stack is the goroutine's stack at the panic.
func (p *PanicError) Stack() string { return p.stack }
