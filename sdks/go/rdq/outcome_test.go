package rdq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

type envelopeT = envelope.Envelope

type opError struct{}

func (*opError) Error() string { return "connection refused" }

func TestErrorTypeIsTheInnermostCausesType(t *testing.T) {
	var syntax error = json.Unmarshal([]byte("{"), new(any))
	cases := []struct {
		err  error
		want string
	}{
		{errors.New("x"), "*errors.errorString"},
		{fmt.Errorf("charging: %w", &opError{}), "*rdq_test.opError"},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", syntax)), "*json.SyntaxError"},
		{fmt.Errorf("no cause: %v", syntax), "*errors.errorString"},
		{rdq.Permanent(fmt.Errorf("declined: %w", &opError{})), "*rdq_test.opError"},
		{rdq.PermanentAs("billing.Declined", &opError{}), "billing.Declined"},
		{fmt.Errorf("outer: %w", rdq.RetryableAs("smtp.Timeout", context.DeadlineExceeded)), "smtp.Timeout"},
		{errors.Join(&opError{}, syntax), "*rdq_test.opError"},                              // the first cause
		{fmt.Errorf("two: %w and %w", syntax, &opError{}), "*json.SyntaxError"},             // the first cause
		{&fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}, "*errors.errorString"}, // fs.ErrNotExist's type
		{context.DeadlineExceeded, "context.deadlineExceededError"},
		{tempError{}, "rdq_test.tempError"},
	}
	for _, tc := range cases {
		if got := rdq.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %s; want %s", tc.err, got, tc.want)
		}
	}
}

func TestResolveClimbsTheLadderInOrder(t *testing.T) {
	classifiers := []rdq.Classifier{
		rdq.RetryableIs(context.DeadlineExceeded),
		rdq.RetryableType[*net.OpError](),
		rdq.PermanentType[*json.SyntaxError]().Named("json.Syntax"),
		rdq.PermanentIs(errSentinel),
	}
	syntax := json.Unmarshal([]byte("{"), new(any))
	cases := []struct {
		name       string
		ret        any
		err        error
		mapper     rdq.OutcomeMapper
		settlement string
		errorType  string
	}{
		{"nil is success", nil, nil, nil, rdq.SettleSuccess, ""},
		{"the mapper is authoritative over an error", nil, errors.New("already processed"),
			func(any, error) rdq.Outcome { return rdq.Success() }, rdq.SettleSuccess, ""},
		{"the mapper sees the return value", false, nil,
			func(ret any, err error) rdq.Outcome {
				if ret == false {
					return rdq.PermanentFailure(errors.New("returned false")).WithType("app.False")
				}
				return rdq.Success()
			}, rdq.SettlePermanentFailure, "app.False"},
		{"the mapper over a wrapper", nil, rdq.Permanent(errors.New("x")),
			func(any, error) rdq.Outcome { return rdq.RetryableFailure(errors.New("y")) }, rdq.SettleRetryableFailure, "*errors.errorString"},
		{"a wrapper over a classifier", nil, rdq.Retryable(fmt.Errorf("p: %w", syntax)), nil, rdq.SettleRetryableFailure, "*json.SyntaxError"},
		{"the outermost wrapper wins", nil, rdq.Permanent(rdq.Retryable(errors.New("x"))), nil, rdq.SettlePermanentFailure, "*errors.errorString"},
		{"defer is no failure", nil, fmt.Errorf("later: %w", rdq.Defer(time.Minute)), nil, rdq.SettleDefer, ""},
		{"a sentinel classifier", nil, fmt.Errorf("wrapped: %w", errSentinel), nil, rdq.SettlePermanentFailure, "*errors.errorString"},
		{"a type classifier with a name", nil, fmt.Errorf("decode: %w", syntax), nil, rdq.SettlePermanentFailure, "json.Syntax"},
		{"classifiers in order", nil, errors.Join(context.DeadlineExceeded, syntax), nil, rdq.SettleRetryableFailure, "context.deadlineExceededError"},
		{"unclassified goes to the queue's globs", nil, &opError{}, nil, rdq.SettleFailure, "*rdq_test.opError"},
	}
	for _, tc := range cases {
		o := rdq.Resolve(tc.ret, tc.err, tc.mapper, classifiers)
		if o.Settlement() != tc.settlement || o.ErrorType() != tc.errorType {
			t.Errorf("%s: %s %q; want %s %q", tc.name, o.Settlement(), o.ErrorType(), tc.settlement, tc.errorType)
		}
	}
	if d := rdq.Resolve(nil, rdq.Defer(time.Minute), nil, nil).Delay(); d != time.Minute {
		t.Errorf("defer delay %v", d)
	}
	for _, tc := range []struct {
		err   error
		scope string
	}{
		{rdq.Defer(time.Second), ""},
		{fmt.Errorf("upstream said 429: %w", rdq.Throttle(time.Second)), rdq.ThrottleScopeKey},
		{rdq.ThrottleQueue(time.Second), rdq.ThrottleScopeQueue},
	} {
		o := rdq.Resolve(nil, tc.err, nil, nil)
		if o.Settlement() != rdq.SettleDefer || o.Delay() != time.Second || o.Throttle() != tc.scope {
			t.Errorf("%v: %s for %v throttling %q; want DEFER for 1s throttling %q", tc.err, o.Settlement(), o.Delay(), o.Throttle(), tc.scope)
		}
	}
}

func TestWrappersKeepNilAndTheMessage(t *testing.T) {
	if rdq.Permanent(nil) != nil || rdq.Retryable(nil) != nil {
		t.Fatal("a wrapped nil is not nil")
	}
	inner := &opError{}
	err := rdq.Permanent(fmt.Errorf("charging: %w", inner))
	var target *opError
	if err.Error() != "charging: connection refused" || !errors.As(err, &target) {
		t.Fatalf("%v", err)
	}
}

func TestRegisteringABadOrDuplicateRefPanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	reg := rdq.NewRegistry()
	h := func(context.Context, envelopeT) error { return nil }
	reg.Register("ok", h)
	mustPanic("duplicate", func() { reg.Register("ok", h) })
	mustPanic("bad ref", func() { reg.Register("Not OK", h) })
	mustPanic("no mapper", func() {
		reg.RegisterResult("r", func(context.Context, envelopeT) (any, error) { return nil, nil }, nil)
	})
}
