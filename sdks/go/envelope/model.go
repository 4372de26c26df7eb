package envelope

import (
	"encoding/json"
	"time"
)

// Version is the envelope version this package reads and writes.
const Version = 1

// Status is where a task is in its life.
type Status string

// The task statuses.
const (
	StatusPending   Status = "PENDING"
	StatusInFlight  Status = "IN_FLIGHT"
	StatusSucceeded Status = "SUCCEEDED"
	StatusDead      Status = "DEAD"
)

func (s Status) valid() bool {
	switch s {
	case StatusPending, StatusInFlight, StatusSucceeded, StatusDead:
		return true
	}
	return false
}

// Outcome is how one attempt ended.
type Outcome string

// The attempt outcomes. LeaseExpired is recorded by the engine only.
const (
	OutcomeSuccess          Outcome = "SUCCESS"
	OutcomeRetryableFailure Outcome = "RETRYABLE_FAILURE"
	OutcomePermanentFailure Outcome = "PERMANENT_FAILURE"
	OutcomeLeaseExpired     Outcome = "LEASE_EXPIRED"
)

func (o Outcome) valid() bool {
	switch o {
	case OutcomeSuccess, OutcomeRetryableFailure, OutcomePermanentFailure, OutcomeLeaseExpired:
		return true
	}
	return false
}

// Bits of the absent sets: which optional fields the writer left out. A
// field left out and still at its default is left out again on encoding.
const (
	absentHandlerVersion uint16 = 1 << iota
	absentPayloadRef
	absentHeaders
	absentPriority
	absentDeferralCount
	absentAttemptCount
	absentRedriveCount
	absentNextAttemptAt
	absentLeaseExpiresAt
	absentAttempts
	absentClaimCount
	// Unlike the others, set when dead_reason was written as null: an unset
	// dead reason is left out unless its writer wrote it so.
	deadReasonNull
	// Like deadReasonNull, for cancel_requested.
	cancelRequestedNull
)

const (
	absentFinishedAt uint16 = 1 << iota
	absentOutcome
	absentError
)

const (
	absentDetail uint16 = 1 << iota
	absentStack
)

const absentMessage uint16 = 1

// ErrorInfo is the error recorded with a failed attempt.
type ErrorInfo struct {
	// Type is the language-native type name; classification globs match it.
	Type string
	// Message is at most 4 KiB when recorded by rdq.
	Message string
	// Detail is optional structured JSON (nil: null or absent).
	Detail json.RawMessage
	// Stack is optional, at most 64 KiB when recorded by rdq.
	Stack *string
	// Extra holds fields this version does not know, in canonical form.
	Extra  map[string]json.RawMessage
	absent uint16
}

// Attempt is one execution of a task.
type Attempt struct {
	// AttemptNo is 1-based within the task's whole history.
	AttemptNo  uint32
	StartedAt  time.Time
	FinishedAt *time.Time // nil while in flight
	Outcome    Outcome    // "" while in flight (null on the wire)
	Error      *ErrorInfo
	Extra      map[string]json.RawMessage
	absent     uint16
}

// DeadReason is why a task is DEAD: what caused it, who decided, and when.
// rdq writes one on every transition to DEAD and removes it on redrive;
// codes from newer writers are kept as written.
type DeadReason struct {
	// Code is the cause, [A-Z][A-Z0-9_]* in at most 64 bytes: one of the
	// DeadReason constants or a newer code.
	Code string
	// At is when the task became DEAD.
	At time.Time
	// By is who or what decided: "worker" (a settle), "reaper" (a lapsed
	// lease), or the principal that cancelled the task.
	By string
	// Message is details for people, at most 4 KiB when recorded by rdq
	// (nil: null or absent).
	Message *string
	// Extra holds fields this version does not know, in canonical form.
	Extra  map[string]json.RawMessage
	absent uint16
}

// CancelRequest is a cancel asked of a task while it ran: who asked, when,
// and why. rdq sets it on an IN_FLIGHT task that is cancelled; the worker
// holding the lease learns of it, and an outcome other than success then
// ends the task DEAD with reason CANCELLED. It is kept as history once the
// task has finished and removed by a redrive.
type CancelRequest struct {
	// At is when the cancel was asked.
	At time.Time
	// By is who asked (the principal's name).
	By string
	// Message is details for people, at most 4 KiB when recorded by rdq
	// (nil: null or absent).
	Message *string
	// Extra holds fields this version does not know, in canonical form.
	Extra  map[string]json.RawMessage
	absent uint16
}

// The reason codes rdq writes. Readers meet newer ones too: a code is valid
// when IsValidDeadReasonCode says so, known or not.
const (
	// DeadReasonAttemptsExhausted: a failure spent the last of the queue's
	// max_attempts (a lapsed lease counts as a failed attempt).
	DeadReasonAttemptsExhausted = "ATTEMPTS_EXHAUSTED"
	// DeadReasonPermanentFailure: the handler's failure was permanent.
	DeadReasonPermanentFailure = "PERMANENT_FAILURE"
	// DeadReasonLeaseExpiriesExhausted: the lease lapsed max_lease_expiries
	// times, a handler that keeps killing its worker.
	DeadReasonLeaseExpiriesExhausted = "LEASE_EXPIRIES_EXHAUSTED"
	// DeadReasonCancelled: cancelled by an operator or a program.
	DeadReasonCancelled = "CANCELLED"
	// DeadReasonHandlerVersionMismatch: the task's handler_version differs
	// from the worker's and the queue dead-letters such tasks.
	DeadReasonHandlerVersionMismatch = "HANDLER_VERSION_MISMATCH"
	// DeadReasonCountersExhausted: a counter reached its maximum, so the
	// task could never run again.
	DeadReasonCountersExhausted = "COUNTERS_EXHAUSTED"
)

// NewDeadReason returns a reason as rdq records it: code, decided by the
// given by at the given time, with message cut to 4 KiB.
func NewDeadReason(code, by string, at time.Time, message string) DeadReason {
	message = TruncateMessage(message)
	return DeadReason{Code: code, At: at.UTC().Truncate(time.Millisecond), By: by, Message: &message}
}

// NewCancelRequest returns a cancel request as rdq records it: asked by the
// given by at the given time, with message cut to 4 KiB.
func NewCancelRequest(by string, at time.Time, message string) CancelRequest {
	message = TruncateMessage(message)
	return CancelRequest{At: at.UTC().Truncate(time.Millisecond), By: by, Message: &message}
}

// IsValidDeadReasonCode reports whether code is a well-formed reason code,
// known or not: [A-Z][A-Z0-9_]*, 1 to 64 bytes.
func IsValidDeadReasonCode(code string) bool {
	if len(code) == 0 || len(code) > 64 || code[0] < 'A' || code[0] > 'Z' {
		return false
	}
	for i := 1; i < len(code); i++ {
		c := code[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Envelope is a task: the one representation every rdq component agrees on.
// Field notes are in docs/envelope.md.
type Envelope struct {
	EnvelopeVersion int // always 1 once decoded
	ID              string
	Queue           string
	HandlerRef      string
	HandlerVersion  *string
	// Payload is the opaque payload bytes (base64 on the wire).
	Payload            []byte
	PayloadContentType string
	// PayloadRef is reserved for a claim-check pointer; rdq never sets it.
	PayloadRef     *string
	Headers        map[string]string
	Status         Status
	Priority       uint8
	DeferralCount  uint32
	AttemptCount   uint32
	RedriveCount   uint32
	ClaimCount     uint32
	NextAttemptAt  *time.Time
	LeaseExpiresAt *time.Time
	CreatedAt      time.Time
	Attempts       []Attempt
	// DeadReason is why the task is DEAD; nil while it is not (or when its
	// writer predates the member).
	DeadReason *DeadReason
	// CancelRequested is the cancel asked of the task while it ran; nil
	// when none was (or when its writer predates the member). Kept once the
	// task has finished; a redrive removes it.
	CancelRequested *CancelRequest
	// Extra holds fields this version does not know, in canonical form.
	Extra  map[string]json.RawMessage
	absent uint16
}

// Header returns the header value for key, or "".
func (e *Envelope) Header(key string) string { return e.Headers[key] }

// CorrelationID is the task's correlation id: the system header
// rdq.correlation_id, or the user header correlation-id the Go client
// writes (the HTTP API has no way to set the system header).
func (e *Envelope) CorrelationID() string {
	if id := e.Headers["rdq.correlation_id"]; id != "" {
		return id
	}
	return e.Headers[CorrelationHeader]
}

// FlowKey is the task's flow key (the system header rdq.flow_key, set at
// submit from Task.FlowKey), or "" when it has none. The queue's per-key
// limits and fairness count it (docs/flow-control.md).
func (e *Envelope) FlowKey() string {
	return e.Headers[FlowKeyHeader]
}

// FlowKeyHeader is the system header that carries a task's flow key.
const FlowKeyHeader = "rdq.flow_key"

// CorrelationHeader is the user header the Go client stores a correlation
// id in.
const CorrelationHeader = "correlation-id"

// LastError is the error of the most recent attempt that has one.
func (e *Envelope) LastError() *ErrorInfo {
	for i := len(e.Attempts) - 1; i >= 0; i-- {
		if e.Attempts[i].Error != nil {
			return e.Attempts[i].Error
		}
	}
	return nil
}

// MarkWritten marks every optional field as written, as rdq does for each
// envelope it changes, so one state has one encoding (payload_ref excepted:
// it is never populated; an unset dead reason or cancel request is left
// out).
func (e *Envelope) MarkWritten() { e.absent &= absentPayloadRef }

// New returns a fresh PENDING envelope with a new id, due at now, the way
// rdq creates one (every optional field written except payload_ref).
func New(queue, handlerRef string, payload []byte, contentType string, now time.Time) Envelope {
	now = now.UTC().Truncate(time.Millisecond)
	due := now
	return Envelope{
		EnvelopeVersion:    Version,
		ID:                 NewID(),
		Queue:              queue,
		HandlerRef:         handlerRef,
		Payload:            payload,
		PayloadContentType: contentType,
		Headers:            map[string]string{},
		Status:             StatusPending,
		NextAttemptAt:      &due,
		CreatedAt:          now,
		Attempts:           []Attempt{},
		absent:             absentPayloadRef,
	}
}
