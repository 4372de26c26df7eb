package envelope

import (
	"encoding/json"
	"strings"
)

// Building an envelope from another form of it: the gRPC API's protobuf
// envelope names the optional members its JSON left out and carries the
// members rdq does not know as canonical JSON text (docs/grpc.md). These
// functions let a converter rebuild exactly the envelope that JSON decodes
// to, so that it encodes to the same bytes.

// Omit marks an optional member of the envelope as left out by its writer
// (handler_version, payload_ref, headers, priority, deferral_count,
// attempt_count, redrive_count, claim_count, next_attempt_at,
// lease_expires_at, attempts, dead_reason, cancel_requested), as Decode does for a member
// missing from the JSON. It reports false for any other name.
func (e *Envelope) Omit(member string) bool {
	var b uint16
	switch member {
	case "handler_version":
		b = absentHandlerVersion
	case "payload_ref":
		b = absentPayloadRef
	case "headers":
		b = absentHeaders
	case "priority":
		b = absentPriority
	case "deferral_count":
		b = absentDeferralCount
	case "attempt_count":
		b = absentAttemptCount
	case "redrive_count":
		b = absentRedriveCount
	case "claim_count":
		b = absentClaimCount
	case "next_attempt_at":
		b = absentNextAttemptAt
	case "lease_expires_at":
		b = absentLeaseExpiresAt
	case "attempts":
		b = absentAttempts
	case "dead_reason":
		// Left out is an unset reason's default: only a null is undone.
		e.absent &^= deadReasonNull
		return true
	case "cancel_requested":
		e.absent &^= cancelRequestedNull
		return true
	default:
		return false
	}
	e.absent |= b
	return true
}

// NullDeadReason marks an unset dead_reason as written null by its writer,
// as Decode does for "dead_reason": null (Omit("dead_reason") undoes it).
func (e *Envelope) NullDeadReason() {
	if e.DeadReason == nil {
		e.absent |= deadReasonNull
	}
}

// NullCancelRequested marks an unset cancel_requested as written null by
// its writer, as Decode does for "cancel_requested": null
// (Omit("cancel_requested") undoes it).
func (e *Envelope) NullCancelRequested() {
	if e.CancelRequested == nil {
		e.absent |= cancelRequestedNull
	}
}

// Omit marks an optional member of a cancel request (message) as left out
// by its writer; false for any other name.
func (r *CancelRequest) Omit(member string) bool {
	if member != "message" {
		return false
	}
	r.absent |= absentMessage
	return true
}

// Omit marks an optional member of a dead reason (message) as left out by
// its writer; false for any other name.
func (r *DeadReason) Omit(member string) bool {
	if member != "message" {
		return false
	}
	r.absent |= absentMessage
	return true
}

// Omit marks an optional member of the attempt (finished_at, outcome,
// error) as left out by its writer; false for any other name.
func (a *Attempt) Omit(member string) bool {
	switch member {
	case "finished_at":
		a.absent |= absentFinishedAt
	case "outcome":
		a.absent |= absentOutcome
	case "error":
		a.absent |= absentError
	default:
		return false
	}
	return true
}

// Omit marks an optional member of the error (detail, stack) as left out by
// its writer; false for any other name.
func (e *ErrorInfo) Omit(member string) bool {
	switch member {
	case "detail":
		e.absent |= absentDetail
	case "stack":
		e.absent |= absentStack
	default:
		return false
	}
	return true
}

// ParseExtra reads a JSON object's text into the form of Extra: each
// member's value in canonical JSON, with Decode's strictness (duplicate
// keys, invalid UTF-8 and lone surrogates refused; numbers keep every
// digit). Blank text is no member.
func ParseExtra(text string) (map[string]json.RawMessage, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	v, err := parseStrict([]byte(text))
	if err != nil {
		return nil, &Error{Code: CodeMalformedEnvelope, Message: err.Error()}
	}
	if v.kind != kindObject {
		return nil, malformed("", "expected an object of unknown members, found %s", v.typeName())
	}
	if len(v.obj) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(v.obj))
	for _, m := range v.obj {
		out[m.key] = appendValue(nil, m.val)
	}
	return out, nil
}

// CanonicalJSON parses JSON text with Decode's strictness and returns its
// canonical form (compact, keys sorted, numbers exactly as written but for
// the exponent's spelling), as an error's detail is kept.
func CanonicalJSON(text []byte) (json.RawMessage, error) {
	out, err := canonicalJSON(text)
	if err != nil {
		return nil, &Error{Code: CodeMalformedEnvelope, Message: err.Error()}
	}
	return out, nil
}
