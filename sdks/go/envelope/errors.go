package envelope

import "fmt"

// Code is a stable, machine-readable reason an envelope was refused. The
// strings are rdq's public contract, shared with the Rust codec, the HTTP
// API's problem documents and the compliance fixtures.
type Code string

// The envelope's error codes.
const (
	// CodeMalformedEnvelope: not JSON, not an object, a duplicate key, a
	// missing required field or a value of the wrong JSON type.
	CodeMalformedEnvelope Code = "MALFORMED_ENVELOPE"
	// CodeUnsupportedEnvelopeVersion: envelope_version is newer than 1.
	CodeUnsupportedEnvelopeVersion Code = "UNSUPPORTED_ENVELOPE_VERSION"
	// CodeInvalidQueueName: queue is not 1–240 bytes of [a-z0-9._-].
	CodeInvalidQueueName Code = "INVALID_QUEUE_NAME"
	// CodeInvalidHandlerRef: handler_ref is not 1–240 bytes of [a-z0-9._-].
	CodeInvalidHandlerRef Code = "INVALID_HANDLER_REF"
	// CodeInvalidField: a value of the right JSON type that breaks a rule.
	CodeInvalidField Code = "INVALID_FIELD"
	// CodePayloadTooLarge: the canonical encoding is longer than the limit.
	CodePayloadTooLarge Code = "PAYLOAD_TOO_LARGE"
	// CodeReservedHeader: a user header uses the reserved rdq. prefix.
	CodeReservedHeader Code = "RESERVED_HEADER"
)

// Error is why an envelope (or part of one) was refused: a stable code, the
// JSON path of the offending field when there is one, and a message.
type Error struct {
	Code    Code
	Path    string // e.g. "attempts[0].error.type"; empty when about no field
	Message string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s: %s", e.Code, e.Path, e.Message)
}

// ErrorCode returns the stable code, so callers holding any rdq error can
// branch on it through one interface.
func (e *Error) ErrorCode() string { return string(e.Code) }

func malformed(path, format string, args ...any) *Error {
	return &Error{Code: CodeMalformedEnvelope, Path: path, Message: fmt.Sprintf(format, args...)}
}

func invalid(path, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidField, Path: path, Message: fmt.Sprintf(format, args...)}
}
