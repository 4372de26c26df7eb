package rdq

import (
	"errors"
	"fmt"

	"rdq.dev/sdk/go/envelope"
)

// Stable error codes the server answers with (docs/http-api.md). Compare
// with Error.Code, or use ErrorCode(err).
const (
	CodeMalformedRequest  = "MALFORMED_REQUEST"
	CodeInvalidField      = "INVALID_FIELD"
	CodeInvalidQueueName  = "INVALID_QUEUE_NAME"
	CodeInvalidHandlerRef = "INVALID_HANDLER_REF"
	CodeReservedHeader    = "RESERVED_HEADER"
	CodeInvalidPolicy     = "INVALID_POLICY"
	CodeInvalidArgument   = "INVALID_ARGUMENT"
	CodeInvalidImport     = "INVALID_IMPORT"
	CodeUnauthenticated   = "UNAUTHENTICATED"
	CodeForbidden         = "FORBIDDEN"
	CodeTaskNotFound      = "TASK_NOT_FOUND"
	CodeQueueNotFound     = "QUEUE_NOT_FOUND"
	CodeRouteNotFound     = "ROUTE_NOT_FOUND"
	CodeMethodNotAllowed  = "METHOD_NOT_ALLOWED"
	CodeLeaseLost         = "LEASE_LOST"
	CodeInvalidTransition = "INVALID_TRANSITION"
	CodePayloadTooLarge   = "PAYLOAD_TOO_LARGE"
	CodeUnsupported       = "UNSUPPORTED"
	CodeStoreUnavailable  = "STORE_UNAVAILABLE"
	CodeShuttingDown      = "SHUTTING_DOWN"

	// A unique key another task holds (docs/uniqueness.md): Error.Holder
	// names that task, Error.Hold its hold. HTTP 409, gRPC ABORTED.
	CodeUniqueHeld = "UNIQUE_HELD"

	// Schedules (docs/schedules.md#limits-and-error-codes).
	CodeInvalidScheduleName = "INVALID_SCHEDULE_NAME"
	CodeInvalidCron         = "INVALID_CRON"
	CodeUnknownTimeZone     = "UNKNOWN_TIME_ZONE"
	CodeInvalidInterval     = "INVALID_INTERVAL"
	CodeInvalidWindow       = "INVALID_WINDOW"
	CodeScheduleNotFound    = "SCHEDULE_NOT_FOUND"

	// Sources (docs/sources.md#errors): a source the server does not run,
	// or on a queue the caller may not read.
	CodeSourceNotFound = "SOURCE_NOT_FOUND"
)

// Error is a refusal with rdq's stable code: a problem document from the
// server (Status is its HTTP status), or a check the client made before
// sending anything (Status 0; the envelope.Error it came from is wrapped).
// Branch on it with errors.As:
//
//	var e *rdq.Error
//	if errors.As(err, &e) && e.Code == rdq.CodeReservedHeader { … }
type Error struct {
	Status int    // HTTP status; 0 when the client refused before any request
	Code   string // stable code, e.g. TASK_NOT_FOUND
	Title  string
	Detail string
	Field  string // path of the offending field, when there is one
	// Holder, with CodeUniqueHeld, is the id of the task that holds the
	// unique key; Hold is its hold as the server names it: "until_started",
	// "until_finished", "until_succeeded", "forever", or "for:MS" (HoldFor,
	// with the hold's milliseconds).
	Holder string
	Hold   string
	cause  error
}

func (e *Error) Error() string {
	switch {
	case e.Field != "" && e.Detail != "":
		return fmt.Sprintf("rdq: %s: %s: %s", e.Code, e.Field, e.Detail)
	case e.Detail != "":
		return fmt.Sprintf("rdq: %s: %s", e.Code, e.Detail)
	default:
		return fmt.Sprintf("rdq: %s", e.Code)
	}
}

// Unwrap returns the envelope.Error of a client-side refusal.
func (e *Error) Unwrap() error { return e.cause }

// ErrorCode returns the stable code of err if it is, or wraps, an *Error or
// an *envelope.Error; otherwise "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var ee *envelope.Error
	if errors.As(err, &ee) {
		return string(ee.Code)
	}
	return ""
}

func localError(err error) error {
	var ee *envelope.Error
	if errors.As(err, &ee) {
		return &Error{Code: string(ee.Code), Detail: ee.Message, Field: ee.Path, cause: ee}
	}
	return err
}
