package envelope

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strconv"
	"time"
)

var envelopeKeys = keySet("envelope_version", "id", "queue", "handler_ref", "handler_version",
	"payload", "payload_content_type", "payload_ref", "headers", "status", "priority",
	"deferral_count", "attempt_count", "redrive_count", "claim_count", "next_attempt_at",
	"lease_expires_at", "created_at", "attempts", "dead_reason", "cancel_requested")
var attemptKeys = keySet("attempt_no", "started_at", "finished_at", "outcome", "error")
var errorKeys = keySet("type", "message", "detail", "stack")
var deadReasonKeys = keySet("code", "at", "by", "message")
var cancelRequestKeys = keySet("at", "by", "message")

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// Encode returns the canonical encoding: compact JSON, known fields in the
// order of docs/envelope.md, then unknown fields sorted by key, the same at
// every level. It refuses an envelope a decoder would refuse (a bad name,
// id, status, outcome or timestamp, an unparsable Extra value), with the
// same codes, so every encoding decodes again.
func (e *Envelope) Encode() ([]byte, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(e.Payload))+512)
	return e.appendTo(out)
}

// MarshalJSON is Encode, for embedding envelopes in other JSON documents.
func (e Envelope) MarshalJSON() ([]byte, error) { return e.Encode() }

func (e *Envelope) validate() error {
	if !IsValidID(e.ID) {
		return invalid("id", "%q is not a ULID (26 upper-case Crockford base32 characters)", e.ID)
	}
	if err := ValidateQueueName(e.Queue); err != nil {
		return err
	}
	if err := ValidateHandlerRef(e.HandlerRef); err != nil {
		return err
	}
	if !e.Status.valid() {
		return invalid("status", "unknown status %q", e.Status)
	}
	for _, ts := range []struct {
		path string
		t    *time.Time
	}{{"next_attempt_at", e.NextAttemptAt}, {"lease_expires_at", e.LeaseExpiresAt}, {"created_at", &e.CreatedAt}} {
		if ts.t != nil && !timestampInRange(*ts.t) {
			return invalid(ts.path, "outside years 0000-9999")
		}
	}
	for i := range e.Attempts {
		at := &e.Attempts[i]
		prefix := "attempts[" + strconv.Itoa(i) + "]"
		if at.AttemptNo == 0 {
			return invalid(prefix+".attempt_no", "attempt numbers start at 1")
		}
		if !timestampInRange(at.StartedAt) || (at.FinishedAt != nil && !timestampInRange(*at.FinishedAt)) {
			return invalid(prefix+".started_at", "outside years 0000-9999")
		}
		if at.Outcome != "" && !at.Outcome.valid() {
			return invalid(prefix+".outcome", "unknown outcome %q", at.Outcome)
		}
		if at.Error != nil && at.Error.Type == "" {
			return invalid(prefix+".error.type", "the error type must not be empty")
		}
	}
	if r := e.DeadReason; r != nil {
		if !IsValidDeadReasonCode(r.Code) {
			return invalid("dead_reason.code", "%q is not a reason code ([A-Z][A-Z0-9_], at most 64 bytes)", r.Code)
		}
		if !timestampInRange(r.At) {
			return invalid("dead_reason.at", "outside years 0000-9999")
		}
		if r.By == "" {
			return invalid("dead_reason.by", "who decided must not be empty")
		}
	}
	if r := e.CancelRequested; r != nil {
		if !timestampInRange(r.At) {
			return invalid("cancel_requested.at", "outside years 0000-9999")
		}
		if r.By == "" {
			return invalid("cancel_requested.by", "who asked must not be empty")
		}
	}
	return nil
}

// objectWriter writes one compact JSON object field by field.
type objectWriter struct {
	out   []byte
	first bool
}

func (w *objectWriter) key(k string) {
	if !w.first {
		w.out = append(w.out, ',')
	}
	w.first = false
	w.out = appendString(w.out, k)
	w.out = append(w.out, ':')
}

func (w *objectWriter) str(k, v string) {
	w.key(k)
	w.out = appendString(w.out, v)
}

func (w *objectWriter) optStr(k string, v *string) {
	w.key(k)
	if v == nil {
		w.out = append(w.out, "null"...)
	} else {
		w.out = appendString(w.out, *v)
	}
}

func (w *objectWriter) uint(k string, v uint64) {
	w.key(k)
	w.out = strconv.AppendUint(w.out, v, 10)
}

func (w *objectWriter) time(k string, t time.Time) {
	w.key(k)
	w.out = append(w.out, '"')
	w.out = appendTimestamp(w.out, t)
	w.out = append(w.out, '"')
}

func (w *objectWriter) optTime(k string, t *time.Time) {
	if t == nil {
		w.key(k)
		w.out = append(w.out, "null"...)
		return
	}
	w.time(k, *t)
}

func (w *objectWriter) raw(k string, v json.RawMessage, path string) error {
	w.key(k)
	if v == nil {
		w.out = append(w.out, "null"...)
		return nil
	}
	c, err := canonicalJSON(v)
	if err != nil {
		return malformed(path, "%s", err.Error())
	}
	w.out = append(w.out, c...)
	return nil
}

// extra writes unknown fields sorted, skipping any that shadow a known one
// (only possible when a caller filled Extra by hand).
func (w *objectWriter) extra(extra map[string]json.RawMessage, known map[string]bool, prefix string) error {
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !known[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if err := w.raw(k, extra[k], path); err != nil {
			return err
		}
	}
	return nil
}

func has(absent, b uint16) bool { return absent&b != 0 }

func (e *Envelope) appendTo(out []byte) ([]byte, error) {
	a := e.absent
	w := &objectWriter{out: append(out, '{'), first: true}
	w.uint("envelope_version", Version)
	w.str("id", e.ID)
	w.str("queue", e.Queue)
	w.str("handler_ref", e.HandlerRef)
	if !(has(a, absentHandlerVersion) && e.HandlerVersion == nil) {
		w.optStr("handler_version", e.HandlerVersion)
	}
	w.key("payload")
	w.out = append(w.out, '"')
	w.out = base64.StdEncoding.AppendEncode(w.out, e.Payload)
	w.out = append(w.out, '"')
	w.str("payload_content_type", e.PayloadContentType)
	if !(has(a, absentPayloadRef) && e.PayloadRef == nil) {
		w.optStr("payload_ref", e.PayloadRef)
	}
	if !(has(a, absentHeaders) && len(e.Headers) == 0) {
		keys := make([]string, 0, len(e.Headers))
		for k := range e.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		w.key("headers")
		hw := &objectWriter{out: append(w.out, '{'), first: true}
		for _, k := range keys {
			hw.str(k, e.Headers[k])
		}
		w.out = append(hw.out, '}')
	}
	w.str("status", string(e.Status))
	if !(has(a, absentPriority) && e.Priority == 0) {
		w.uint("priority", uint64(e.Priority))
	}
	if !(has(a, absentDeferralCount) && e.DeferralCount == 0) {
		w.uint("deferral_count", uint64(e.DeferralCount))
	}
	if !(has(a, absentAttemptCount) && e.AttemptCount == 0) {
		w.uint("attempt_count", uint64(e.AttemptCount))
	}
	if !(has(a, absentRedriveCount) && e.RedriveCount == 0) {
		w.uint("redrive_count", uint64(e.RedriveCount))
	}
	if !(has(a, absentClaimCount) && e.ClaimCount == 0) {
		w.uint("claim_count", uint64(e.ClaimCount))
	}
	if !(has(a, absentNextAttemptAt) && e.NextAttemptAt == nil) {
		w.optTime("next_attempt_at", e.NextAttemptAt)
	}
	if !(has(a, absentLeaseExpiresAt) && e.LeaseExpiresAt == nil) {
		w.optTime("lease_expires_at", e.LeaseExpiresAt)
	}
	w.time("created_at", e.CreatedAt)
	if !(has(a, absentAttempts) && len(e.Attempts) == 0) {
		w.key("attempts")
		w.out = append(w.out, '[')
		for i := range e.Attempts {
			if i > 0 {
				w.out = append(w.out, ',')
			}
			var err error
			if w.out, err = e.Attempts[i].appendTo(w.out, "attempts["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		w.out = append(w.out, ']')
	}
	switch {
	case e.DeadReason != nil:
		w.key("dead_reason")
		var err error
		if w.out, err = e.DeadReason.appendTo(w.out, "dead_reason"); err != nil {
			return nil, err
		}
	case has(a, deadReasonNull):
		w.key("dead_reason")
		w.out = append(w.out, "null"...)
	}
	switch {
	case e.CancelRequested != nil:
		w.key("cancel_requested")
		var err error
		if w.out, err = e.CancelRequested.appendTo(w.out, "cancel_requested"); err != nil {
			return nil, err
		}
	case has(a, cancelRequestedNull):
		w.key("cancel_requested")
		w.out = append(w.out, "null"...)
	}
	if err := w.extra(e.Extra, envelopeKeys, ""); err != nil {
		return nil, err
	}
	return append(w.out, '}'), nil
}

func (r *Attempt) appendTo(out []byte, prefix string) ([]byte, error) {
	a := r.absent
	w := &objectWriter{out: append(out, '{'), first: true}
	w.uint("attempt_no", uint64(r.AttemptNo))
	w.time("started_at", r.StartedAt)
	if !(has(a, absentFinishedAt) && r.FinishedAt == nil) {
		w.optTime("finished_at", r.FinishedAt)
	}
	if !(has(a, absentOutcome) && r.Outcome == "") {
		w.key("outcome")
		if r.Outcome == "" {
			w.out = append(w.out, "null"...)
		} else {
			w.out = appendString(w.out, string(r.Outcome))
		}
	}
	if !(has(a, absentError) && r.Error == nil) {
		w.key("error")
		if r.Error == nil {
			w.out = append(w.out, "null"...)
		} else {
			var err error
			if w.out, err = r.Error.appendTo(w.out, prefix+".error"); err != nil {
				return nil, err
			}
		}
	}
	if err := w.extra(r.Extra, attemptKeys, prefix); err != nil {
		return nil, err
	}
	return append(w.out, '}'), nil
}

func (e *ErrorInfo) appendTo(out []byte, prefix string) ([]byte, error) {
	a := e.absent
	w := &objectWriter{out: append(out, '{'), first: true}
	w.str("type", e.Type)
	w.str("message", e.Message)
	if !(has(a, absentDetail) && e.Detail == nil) {
		if err := w.raw("detail", e.Detail, prefix+".detail"); err != nil {
			return nil, err
		}
	}
	if !(has(a, absentStack) && e.Stack == nil) {
		w.optStr("stack", e.Stack)
	}
	if err := w.extra(e.Extra, errorKeys, prefix); err != nil {
		return nil, err
	}
	return append(w.out, '}'), nil
}

func (r *DeadReason) appendTo(out []byte, prefix string) ([]byte, error) {
	w := &objectWriter{out: append(out, '{'), first: true}
	w.str("code", r.Code)
	w.time("at", r.At)
	w.str("by", r.By)
	if !(has(r.absent, absentMessage) && r.Message == nil) {
		w.optStr("message", r.Message)
	}
	if err := w.extra(r.Extra, deadReasonKeys, prefix); err != nil {
		return nil, err
	}
	return append(w.out, '}'), nil
}

func (r *CancelRequest) appendTo(out []byte, prefix string) ([]byte, error) {
	w := &objectWriter{out: append(out, '{'), first: true}
	w.time("at", r.At)
	w.str("by", r.By)
	if !(has(r.absent, absentMessage) && r.Message == nil) {
		w.optStr("message", r.Message)
	}
	if err := w.extra(r.Extra, cancelRequestKeys, prefix); err != nil {
		return nil, err
	}
	return append(w.out, '}'), nil
}
