package envelope

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// DefaultMaxBytes is the default limit on a canonical envelope: 1 MiB.
const DefaultMaxBytes = 1024 * 1024

// Decode decodes and validates one envelope, refusing one whose canonical
// encoding exceeds DefaultMaxBytes. Fields are checked in the order of
// docs/envelope.md and the first failure is reported, as the Rust codec does.
func Decode(data []byte) (Envelope, error) {
	return DecodeWithLimit(data, DefaultMaxBytes)
}

// DecodeWithLimit is Decode with a size limit of maxBytes.
func DecodeWithLimit(data []byte, maxBytes int) (Envelope, error) {
	env, err := decodeBytes(data)
	if err != nil {
		return Envelope{}, err
	}
	if err := env.CheckSize(maxBytes); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// CheckSize refuses with PAYLOAD_TOO_LARGE an envelope whose canonical
// encoding is longer than maxBytes.
func (e *Envelope) CheckSize(maxBytes int) error {
	b, err := e.Encode()
	if err != nil {
		return err
	}
	if len(b) > maxBytes {
		return &Error{Code: CodePayloadTooLarge, Message: "the serialised envelope is " +
			strconv.Itoa(len(b)) + " bytes; the limit is " + strconv.Itoa(maxBytes)}
	}
	return nil
}

// UnmarshalJSON decodes with Decode's rules (without the size limit), so an
// Envelope can sit inside other JSON documents.
func (e *Envelope) UnmarshalJSON(data []byte) error {
	env, err := decodeBytes(data)
	if err != nil {
		return err
	}
	*e = env
	return nil
}

func decodeBytes(data []byte) (Envelope, error) {
	v, err := parseStrict(data)
	if err != nil {
		return Envelope{}, &Error{Code: CodeMalformedEnvelope, Message: err.Error()}
	}
	return decodeEnvelope(v)
}

// fields is one JSON object being taken apart; what is left is Extra.
type fields struct {
	m      []member // not taken yet
	prefix string
}

func newFields(v value, prefix string) (*fields, error) {
	if v.kind != kindObject {
		return nil, malformed(prefix, "expected an object, found %s", v.typeName())
	}
	// Taking reorders v's members in place: every parsed value is decoded
	// once, straight after parsing, and never read again.
	return &fields{m: v.obj, prefix: prefix}, nil
}

func (f *fields) path(key string) string {
	if f.prefix == "" {
		return key
	}
	return f.prefix + "." + key
}

func (f *fields) take(key string) (value, bool) {
	for i := range f.m {
		if f.m[i].key == key {
			v := f.m[i].val
			last := len(f.m) - 1
			f.m[i] = f.m[last]
			f.m = f.m[:last]
			return v, true
		}
	}
	return value{}, false
}

func (f *fields) required(key string) (value, error) {
	v, ok := f.take(key)
	if !ok || v.kind == kindNull {
		return value{}, malformed(f.path(key), "required field is missing or null")
	}
	return v, nil
}

func (f *fields) asString(key string, v value) (string, error) {
	if v.kind != kindString {
		return "", malformed(f.path(key), "expected a string, found %s", v.typeName())
	}
	return v.s, nil
}

func (f *fields) str(key string) (string, error) {
	v, err := f.required(key)
	if err != nil {
		return "", err
	}
	return f.asString(key, v)
}

// optString returns (value, absent); a null gives (nil, false).
func (f *fields) optString(key string) (*string, bool, error) {
	v, ok := f.take(key)
	if !ok {
		return nil, true, nil
	}
	if v.kind == kindNull {
		return nil, false, nil
	}
	s, err := f.asString(key, v)
	if err != nil {
		return nil, false, err
	}
	return &s, false, nil
}

// numberClass sorts number text the way the Rust codec does: a non-negative
// integer that fits u64, a signed one that fits i64 (-0 included), or
// anything else (no integer of a machine type).
func numberClass(text string) (u uint64, isU bool, isNeg bool) {
	if !isIntegerText(text) {
		return 0, false, false
	}
	if text[0] == '-' {
		// The Rust codec's exact numbers read -0 as the i64 0: "negative".
		_, err := strconv.ParseInt(text, 10, 64)
		return 0, false, err == nil
	}
	u, err := strconv.ParseUint(text, 10, 64)
	return u, err == nil, false
}

func (f *fields) asUint(key string, v value, max uint64) (uint64, error) {
	path := f.path(key)
	if v.kind != kindNumber {
		return 0, malformed(path, "expected an integer, found %s", v.typeName())
	}
	u, isU, isNeg := numberClass(v.s)
	switch {
	case isU && u <= max:
		return u, nil
	case isU:
		return 0, invalid(path, "%d is larger than %d", u, max)
	case isNeg:
		return 0, invalid(path, "%s is negative", v.s)
	default:
		return 0, malformed(path, "expected an integer, found %s", v.s)
	}
}

// uintOrZero returns (value, absent).
func (f *fields) uintOrZero(key string, max uint64) (uint64, bool, error) {
	v, ok := f.take(key)
	if !ok {
		return 0, true, nil
	}
	u, err := f.asUint(key, v, max)
	return u, false, err
}

func (f *fields) asTimestamp(key string, v value) (time.Time, error) {
	s, err := f.asString(key, v)
	if err != nil {
		return time.Time{}, err
	}
	t, ok := ParseTimestamp(s)
	if !ok {
		return time.Time{}, invalid(f.path(key),
			"%q is not an RFC 3339 UTC timestamp of the form 2026-07-20T14:03:22.117Z", s)
	}
	return t, nil
}

func (f *fields) timestamp(key string) (time.Time, error) {
	v, err := f.required(key)
	if err != nil {
		return time.Time{}, err
	}
	return f.asTimestamp(key, v)
}

func (f *fields) optTimestamp(key string) (*time.Time, bool, error) {
	v, ok := f.take(key)
	if !ok {
		return nil, true, nil
	}
	if v.kind == kindNull {
		return nil, false, nil
	}
	t, err := f.asTimestamp(key, v)
	if err != nil {
		return nil, false, err
	}
	return &t, false, nil
}

func (f *fields) extra() map[string]json.RawMessage {
	if len(f.m) == 0 {
		return nil
	}
	out := make(map[string]json.RawMessage, len(f.m))
	for _, m := range f.m {
		out[m.key] = appendValue(nil, m.val)
	}
	return out
}

func bit(absent bool, b uint16) uint16 {
	if absent {
		return b
	}
	return 0
}

func decodeEnvelope(v value) (Envelope, error) {
	var env Envelope
	f, err := newFields(v, "")
	if err != nil {
		return env, err
	}

	// The version decides how to read everything else, so it comes first.
	ver, err := f.required("envelope_version")
	if err != nil {
		return env, err
	}
	if ver.kind == kindNumber {
		if u, isU, _ := numberClass(ver.s); isU && u > Version {
			return env, &Error{Code: CodeUnsupportedEnvelopeVersion, Path: "envelope_version",
				Message: "version " + ver.s + " is newer than this engine's version 1"}
		}
	}
	version, err := f.asUint("envelope_version", ver, Version)
	if err != nil {
		return env, err
	}
	if version == 0 {
		return env, invalid("envelope_version", "version 0 does not exist; the first is 1")
	}
	env.EnvelopeVersion = Version

	if env.ID, err = f.str("id"); err != nil {
		return env, err
	}
	if !IsValidID(env.ID) {
		return env, invalid("id", "%q is not a ULID (26 upper-case Crockford base32 characters)", env.ID)
	}
	if env.Queue, err = f.str("queue"); err != nil {
		return env, err
	}
	if err := ValidateQueueName(env.Queue); err != nil {
		return env, err
	}
	if env.HandlerRef, err = f.str("handler_ref"); err != nil {
		return env, err
	}
	if err := ValidateHandlerRef(env.HandlerRef); err != nil {
		return env, err
	}
	var absent uint16
	var a bool
	if env.HandlerVersion, a, err = f.optString("handler_version"); err != nil {
		return env, err
	}
	absent |= bit(a, absentHandlerVersion)
	payload, err := f.str("payload")
	if err != nil {
		return env, err
	}
	if env.Payload, err = decodeCanonicalBase64(payload); err != nil {
		return env, invalid("payload", "not canonical standard base64 with padding")
	}
	if env.PayloadContentType, err = f.str("payload_content_type"); err != nil {
		return env, err
	}
	if env.PayloadRef, a, err = f.optString("payload_ref"); err != nil {
		return env, err
	}
	absent |= bit(a, absentPayloadRef)

	hv, ok := f.take("headers")
	switch {
	case !ok:
		absent |= absentHeaders
		env.Headers = map[string]string{}
	case hv.kind == kindObject:
		sorted := hv.sortedMembers()
		env.Headers = make(map[string]string, len(sorted))
		for _, m := range sorted {
			k, hval := m.key, m.val
			if hval.kind != kindString {
				return env, invalid("headers."+k, "header values must be strings, found %s", hval.typeName())
			}
			env.Headers[k] = hval.s
		}
	default:
		return env, malformed("headers", "expected an object of strings, found %s", hv.typeName())
	}

	status, err := f.str("status")
	if err != nil {
		return env, err
	}
	env.Status = Status(status)
	if !env.Status.valid() {
		return env, invalid("status", "unknown status %q; expected PENDING, IN_FLIGHT, SUCCEEDED or DEAD", status)
	}

	counts := []struct {
		key  string
		max  uint64
		bit  uint16
		dest func(uint64)
	}{
		{"priority", math.MaxUint8, absentPriority, func(u uint64) { env.Priority = uint8(u) }},
		{"deferral_count", math.MaxUint32, absentDeferralCount, func(u uint64) { env.DeferralCount = uint32(u) }},
		{"attempt_count", math.MaxUint32, absentAttemptCount, func(u uint64) { env.AttemptCount = uint32(u) }},
		{"redrive_count", math.MaxUint32, absentRedriveCount, func(u uint64) { env.RedriveCount = uint32(u) }},
		{"claim_count", math.MaxUint32, absentClaimCount, func(u uint64) { env.ClaimCount = uint32(u) }},
	}
	for _, c := range counts {
		u, a, err := f.uintOrZero(c.key, c.max)
		if err != nil {
			return env, err
		}
		c.dest(u)
		absent |= bit(a, c.bit)
	}

	if env.NextAttemptAt, a, err = f.optTimestamp("next_attempt_at"); err != nil {
		return env, err
	}
	absent |= bit(a, absentNextAttemptAt)
	if env.LeaseExpiresAt, a, err = f.optTimestamp("lease_expires_at"); err != nil {
		return env, err
	}
	absent |= bit(a, absentLeaseExpiresAt)
	if env.CreatedAt, err = f.timestamp("created_at"); err != nil {
		return env, err
	}

	av, ok := f.take("attempts")
	switch {
	case !ok:
		absent |= absentAttempts
		env.Attempts = []Attempt{}
	case av.kind == kindArray:
		env.Attempts = make([]Attempt, 0, len(av.obj))
		for i, item := range av.obj {
			at, err := decodeAttempt(item.val, "attempts["+strconv.Itoa(i)+"]")
			if err != nil {
				return env, err
			}
			env.Attempts = append(env.Attempts, at)
		}
	default:
		return env, malformed("attempts", "expected an array, found %s", av.typeName())
	}

	dv, ok := f.take("dead_reason")
	switch {
	case !ok:
	case dv.kind == kindNull:
		absent |= deadReasonNull
	default:
		r, err := decodeDeadReason(dv, "dead_reason")
		if err != nil {
			return env, err
		}
		env.DeadReason = &r
	}

	cv, ok := f.take("cancel_requested")
	switch {
	case !ok:
	case cv.kind == kindNull:
		absent |= cancelRequestedNull
	default:
		r, err := decodeCancelRequest(cv, "cancel_requested")
		if err != nil {
			return env, err
		}
		env.CancelRequested = &r
	}

	env.Extra = f.extra()
	env.absent = absent
	return env, nil
}

func decodeAttempt(v value, prefix string) (Attempt, error) {
	var at Attempt
	f, err := newFields(v, prefix)
	if err != nil {
		return at, err
	}
	no, err := f.required("attempt_no")
	if err != nil {
		return at, err
	}
	n, err := f.asUint("attempt_no", no, math.MaxUint32)
	if err != nil {
		return at, err
	}
	if n == 0 {
		return at, invalid(f.path("attempt_no"), "attempt numbers start at 1")
	}
	at.AttemptNo = uint32(n)
	if at.StartedAt, err = f.timestamp("started_at"); err != nil {
		return at, err
	}
	var a bool
	if at.FinishedAt, a, err = f.optTimestamp("finished_at"); err != nil {
		return at, err
	}
	at.absent |= bit(a, absentFinishedAt)
	outcome, a, err := f.optString("outcome")
	if err != nil {
		return at, err
	}
	at.absent |= bit(a, absentOutcome)
	if outcome != nil {
		at.Outcome = Outcome(*outcome)
		if !at.Outcome.valid() {
			return at, invalid(f.path("outcome"),
				"unknown outcome %q; expected SUCCESS, RETRYABLE_FAILURE, PERMANENT_FAILURE or LEASE_EXPIRED", *outcome)
		}
	}
	ev, ok := f.take("error")
	switch {
	case !ok:
		at.absent |= absentError
	case ev.kind == kindNull:
	default:
		e, err := decodeError(ev, f.path("error"))
		if err != nil {
			return at, err
		}
		at.Error = &e
	}
	at.Extra = f.extra()
	return at, nil
}

func decodeError(v value, prefix string) (ErrorInfo, error) {
	var e ErrorInfo
	f, err := newFields(v, prefix)
	if err != nil {
		return e, err
	}
	if e.Type, err = f.str("type"); err != nil {
		return e, err
	}
	if e.Type == "" {
		return e, invalid(f.path("type"), "the error type must not be empty")
	}
	if e.Message, err = f.str("message"); err != nil {
		return e, err
	}
	dv, ok := f.take("detail")
	switch {
	case !ok:
		e.absent |= absentDetail
	case dv.kind == kindNull:
	default:
		e.Detail = appendValue(nil, dv)
	}
	var a bool
	if e.Stack, a, err = f.optString("stack"); err != nil {
		return e, err
	}
	e.absent |= bit(a, absentStack)
	e.Extra = f.extra()
	return e, nil
}

func decodeDeadReason(v value, prefix string) (DeadReason, error) {
	var r DeadReason
	f, err := newFields(v, prefix)
	if err != nil {
		return r, err
	}
	if r.Code, err = f.str("code"); err != nil {
		return r, err
	}
	if !IsValidDeadReasonCode(r.Code) {
		return r, invalid(f.path("code"), "%q is not a reason code ([A-Z][A-Z0-9_], at most 64 bytes)", r.Code)
	}
	if r.At, err = f.timestamp("at"); err != nil {
		return r, err
	}
	if r.By, err = f.str("by"); err != nil {
		return r, err
	}
	if r.By == "" {
		return r, invalid(f.path("by"), "who decided must not be empty")
	}
	var a bool
	if r.Message, a, err = f.optString("message"); err != nil {
		return r, err
	}
	r.absent = bit(a, absentMessage)
	r.Extra = f.extra()
	return r, nil
}

func decodeCancelRequest(v value, prefix string) (CancelRequest, error) {
	var r CancelRequest
	f, err := newFields(v, prefix)
	if err != nil {
		return r, err
	}
	if r.At, err = f.timestamp("at"); err != nil {
		return r, err
	}
	if r.By, err = f.str("by"); err != nil {
		return r, err
	}
	if r.By == "" {
		return r, invalid(f.path("by"), "who asked must not be empty")
	}
	var a bool
	if r.Message, a, err = f.optString("message"); err != nil {
		return r, err
	}
	r.absent = bit(a, absentMessage)
	r.Extra = f.extra()
	return r, nil
}

const stdAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

var base64Value = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(stdAlphabet); i++ {
		t[stdAlphabet[i]] = byte(i)
	}
	return t
}()

// decodeCanonicalBase64 accepts exactly what a standard padded encoder
// writes: the alphabet only (encoding/base64 would skip CR and LF), length a
// multiple of 4, and zero unused bits before the padding.
func decodeCanonicalBase64(s string) ([]byte, error) {
	if len(s)%4 != 0 {
		return nil, errBadBase64
	}
	pad := 0
	for pad < 2 && pad < len(s) && s[len(s)-1-pad] == '=' {
		pad++
	}
	body := s[:len(s)-pad]
	for i := 0; i < len(body); i++ {
		if base64Value[body[i]] == 0xff {
			return nil, errBadBase64
		}
	}
	if len(body) > 0 {
		last := base64Value[body[len(body)-1]]
		if (pad == 1 && last&0b11 != 0) || (pad == 2 && last&0b1111 != 0) {
			return nil, errBadBase64
		}
	}
	return base64.StdEncoding.DecodeString(s)
}

var errBadBase64 = &Error{Code: CodeInvalidField, Path: "payload", Message: "not canonical standard base64 with padding"}
