package rdq

// The gRPC API's messages and the SDK's own types, one into the other.
// rdq.v1.Envelope maps one-to-one onto the canonical JSON envelope
// (docs/grpc.md), so a task received on the Work stream is the same
// envelope.Envelope, down to the bytes it encodes to, as one claimed over
// HTTP.

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
)

// envelopeFromProto rebuilds the envelope a message carries, refusing one
// that does not map onto a valid envelope.
func envelopeFromProto(p *rdqpb.Envelope) (envelope.Envelope, error) {
	var env envelope.Envelope
	if p == nil {
		return env, badEnvelope("", "missing")
	}
	if p.EnvelopeVersion != envelope.Version {
		return env, badEnvelope("envelope_version", "version %d", p.EnvelopeVersion)
	}
	if !envelope.IsValidID(p.Id) || !envelope.IsValidName(p.Queue) || !envelope.IsValidName(p.HandlerRef) {
		return env, badEnvelope("id", "%q of queue %q, handler %q", p.Id, p.Queue, p.HandlerRef)
	}
	if p.Priority > 255 {
		return env, badEnvelope("priority", "%d", p.Priority)
	}
	env = envelope.Envelope{
		EnvelopeVersion:    envelope.Version,
		ID:                 p.Id,
		Queue:              p.Queue,
		HandlerRef:         p.HandlerRef,
		HandlerVersion:     p.HandlerVersion,
		Payload:            p.Payload,
		PayloadContentType: p.PayloadContentType,
		PayloadRef:         p.PayloadRef,
		Headers:            p.Headers,
		Priority:           uint8(p.Priority),
		DeferralCount:      p.DeferralCount,
		AttemptCount:       p.AttemptCount,
		RedriveCount:       p.RedriveCount,
		ClaimCount:         p.ClaimCount,
	}
	if env.Payload == nil {
		env.Payload = []byte{}
	}
	if env.Headers == nil {
		env.Headers = map[string]string{}
	}
	switch p.Status {
	case rdqpb.Status_PENDING:
		env.Status = envelope.StatusPending
	case rdqpb.Status_IN_FLIGHT:
		env.Status = envelope.StatusInFlight
	case rdqpb.Status_SUCCEEDED:
		env.Status = envelope.StatusSucceeded
	case rdqpb.Status_DEAD:
		env.Status = envelope.StatusDead
	default:
		return env, badEnvelope("status", "%v", p.Status)
	}
	var err error
	if env.CreatedAt, err = timestamp("created_at", p.CreatedAt); err != nil {
		return env, err
	}
	if env.NextAttemptAt, err = optTimestamp("next_attempt_at", p.NextAttemptAt); err != nil {
		return env, err
	}
	if env.LeaseExpiresAt, err = optTimestamp("lease_expires_at", p.LeaseExpiresAt); err != nil {
		return env, err
	}
	env.Attempts = make([]envelope.Attempt, len(p.Attempts))
	for i, a := range p.Attempts {
		if env.Attempts[i], err = attemptFromProto(a); err != nil {
			return env, err
		}
	}
	if d := p.DeadReason; d != nil {
		r := envelope.DeadReason{Code: d.Code, By: d.By, Message: d.Message}
		if r.At, err = timestamp("dead_reason.at", d.At); err != nil {
			return env, err
		}
		for _, m := range d.Omitted {
			if !r.Omit(m) {
				return env, badEnvelope("dead_reason.omitted", "%q", m)
			}
		}
		if r.Extra, err = envelope.ParseExtra(d.UnknownJson); err != nil {
			return env, err
		}
		env.DeadReason = &r
	} else {
		// An unset message field is null unless omitted names it.
		env.NullDeadReason()
	}
	if c := p.CancelRequested; c != nil {
		r, err := cancelRequestFromProto(c)
		if err != nil {
			return env, err
		}
		env.CancelRequested = r
	} else {
		// As dead_reason: unset is null unless omitted names it.
		env.NullCancelRequested()
	}
	for _, m := range p.Omitted {
		if !env.Omit(m) {
			return env, badEnvelope("omitted", "%q", m)
		}
	}
	if env.Extra, err = envelope.ParseExtra(p.UnknownJson); err != nil {
		return env, err
	}
	return env, nil
}

// cancelRequestFromProto is the cancel request a message carries (an
// envelope's cancel_requested, a WorkCancel's request).
func cancelRequestFromProto(c *rdqpb.CancelRequest) (*envelope.CancelRequest, error) {
	if c == nil {
		return nil, badEnvelope("cancel_requested", "missing")
	}
	r := envelope.CancelRequest{By: c.GetBy(), Message: c.Message}
	var err error
	if r.At, err = timestamp("cancel_requested.at", c.GetAt()); err != nil {
		return nil, err
	}
	if r.By == "" {
		return nil, badEnvelope("cancel_requested.by", "empty")
	}
	for _, m := range c.GetOmitted() {
		if !r.Omit(m) {
			return nil, badEnvelope("cancel_requested.omitted", "%q", m)
		}
	}
	if r.Extra, err = envelope.ParseExtra(c.GetUnknownJson()); err != nil {
		return nil, err
	}
	return &r, nil
}

func attemptFromProto(p *rdqpb.AttemptRecord) (envelope.Attempt, error) {
	a := envelope.Attempt{AttemptNo: p.GetAttemptNo()}
	if p == nil {
		return a, badEnvelope("attempts", "a null attempt")
	}
	var err error
	if a.StartedAt, err = timestamp("started_at", p.StartedAt); err != nil {
		return a, err
	}
	if a.FinishedAt, err = optTimestamp("finished_at", p.FinishedAt); err != nil {
		return a, err
	}
	switch p.Outcome {
	case rdqpb.Outcome_OUTCOME_UNSPECIFIED:
	case rdqpb.Outcome_SUCCESS:
		a.Outcome = envelope.OutcomeSuccess
	case rdqpb.Outcome_RETRYABLE_FAILURE:
		a.Outcome = envelope.OutcomeRetryableFailure
	case rdqpb.Outcome_PERMANENT_FAILURE:
		a.Outcome = envelope.OutcomePermanentFailure
	case rdqpb.Outcome_LEASE_EXPIRED:
		a.Outcome = envelope.OutcomeLeaseExpired
	default:
		return a, badEnvelope("outcome", "%v", p.Outcome)
	}
	if e := p.Error; e != nil {
		info := &envelope.ErrorInfo{Type: e.Type, Message: e.Message, Stack: e.Stack}
		if e.DetailJson != nil {
			if info.Detail, err = envelope.CanonicalJSON([]byte(*e.DetailJson)); err != nil {
				return a, err
			}
		}
		for _, m := range e.Omitted {
			if !info.Omit(m) {
				return a, badEnvelope("error.omitted", "%q", m)
			}
		}
		if info.Extra, err = envelope.ParseExtra(e.UnknownJson); err != nil {
			return a, err
		}
		a.Error = info
	}
	for _, m := range p.Omitted {
		if !a.Omit(m) {
			return a, badEnvelope("attempts.omitted", "%q", m)
		}
	}
	if a.Extra, err = envelope.ParseExtra(p.UnknownJson); err != nil {
		return a, err
	}
	return a, nil
}

func timestamp(field, s string) (time.Time, error) {
	t, ok := envelope.ParseTimestamp(s)
	if !ok {
		return t, badEnvelope(field, "%q is not a timestamp", s)
	}
	return t, nil
}

func optTimestamp(field string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := timestamp(field, *s)
	return &t, err
}

func badEnvelope(field, format string, args ...any) error {
	return &envelope.Error{Code: envelope.CodeMalformedEnvelope, Path: field,
		Message: "the gRPC envelope does not map onto a valid one: " + fmt.Sprintf(format, args...)}
}

// settleToProto is a Settle as the gRPC API spells it.
func settleToProto(s Settle) *rdqpb.SettleRequest {
	p := &rdqpb.SettleRequest{Id: s.ID, LeaseToken: s.LeaseToken}
	switch s.Outcome {
	case SettleSuccess:
		p.Outcome = rdqpb.ReportedOutcome_REPORTED_SUCCESS
	case SettleRetryableFailure:
		p.Outcome = rdqpb.ReportedOutcome_REPORTED_RETRYABLE_FAILURE
	case SettlePermanentFailure:
		p.Outcome = rdqpb.ReportedOutcome_REPORTED_PERMANENT_FAILURE
	case SettleFailure:
		p.Outcome = rdqpb.ReportedOutcome_REPORTED_FAILURE
	case SettleDefer:
		p.Outcome = rdqpb.ReportedOutcome_REPORTED_DEFER
	case SettleRelease:
		p.Outcome = rdqpb.ReportedOutcome_REPORTED_RELEASE
	}
	if e := s.Error; e != nil {
		p.Error = &rdqpb.ReportedError{Type: e.Type, Message: e.Message}
		if len(e.Detail) > 0 {
			d := string(e.Detail)
			p.Error.DetailJson = &d
		}
		if e.Stack != "" {
			p.Error.Stack = &e.Stack
		}
	}
	if s.DeferMs != nil {
		ms := uint64(max(*s.DeferMs, 0))
		p.DeferMs = &ms
	}
	switch s.Throttle {
	case ThrottleScopeKey:
		p.Throttle = rdqpb.DeferThrottle_DEFER_THROTTLE_KEY
	case ThrottleScopeQueue:
		p.Throttle = rdqpb.DeferThrottle_DEFER_THROTTLE_QUEUE
	}
	return p
}

// settleResultFromProto is one item of a WorkAck.
func settleResultFromProto(r *rdqpb.SettleItemResult) SettleResult {
	out := SettleResult{ID: r.GetId(), CancelRequested: r.GetCancelRequested()}
	switch {
	case r.GetProblem() != nil:
		out.Err = problemError(r.GetProblem())
	case r.GetEnvelope() != nil:
		env, err := envelopeFromProto(r.GetEnvelope())
		if err != nil {
			out.Err = fmt.Errorf("rdq: the settle answer for %s: %w", out.ID, err)
		}
		out.Envelope = env
		out.CancelRequested = out.CancelRequested || env.CancelRequested != nil
	}
	return out
}

// problemError is the *Error of an rdq.v1.Problem.
func problemError(p *rdqpb.Problem) *Error {
	e := &Error{Status: int(p.GetHttpStatus()), Code: p.GetCode(), Detail: p.GetDetail()}
	if ext := p.GetExtensionsJson(); ext != "" {
		var members struct {
			Field  string `json:"field"`
			Holder string `json:"holder"`
			Hold   string `json:"hold"`
		}
		if json.Unmarshal([]byte(ext), &members) == nil {
			e.Field, e.Holder, e.Hold = members.Field, members.Holder, members.Hold
		}
	}
	return e
}

// statusError turns a failed call's status into the *Error its rdq.v1.Problem
// describes; a status without one (the transport's, or a server that is not
// rdq) is returned as it is, wrapped.
func statusError(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("rdq: %s: %w", what, err)
	}
	for _, d := range st.Proto().GetDetails() {
		var p rdqpb.Problem
		if d.MessageIs(&p) && d.UnmarshalTo(&p) == nil && p.Code != "" {
			return problemError(&p)
		}
	}
	return fmt.Errorf("rdq: %s: %w", what, err)
}
