package envelope

import (
	"fmt"
	"sort"
)

// MaxNameLen is the longest queue name or handler ref, in bytes.
const MaxNameLen = 240

// ReservedHeaderPrefix starts the header keys only the system sets
// (rdq.source, rdq.submitted_by, rdq.correlation_id).
const ReservedHeaderPrefix = "rdq."

// IsValidName reports whether name is 1–240 bytes of [a-z0-9._-], other
// than "." and "..": names end up in URL paths and file names, where those
// two mean "here" and "up".
func IsValidName(name string) bool {
	if name == "" || name == "." || name == ".." || len(name) > MaxNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidateQueueName refuses a bad queue name with INVALID_QUEUE_NAME.
func ValidateQueueName(name string) error {
	return checkName(name, CodeInvalidQueueName, "queue")
}

// ValidateHandlerRef refuses a bad handler ref with INVALID_HANDLER_REF.
func ValidateHandlerRef(name string) error {
	return checkName(name, CodeInvalidHandlerRef, "handler_ref")
}

func checkName(name string, code Code, field string) error {
	if IsValidName(name) {
		return nil
	}
	var why string
	switch {
	case name == "":
		why = "must not be empty"
	case name == "." || name == "..":
		why = fmt.Sprintf("%q is a path segment, not a name", name)
	case len(name) > MaxNameLen:
		why = fmt.Sprintf("is %d bytes long; the limit is %d", len(name), MaxNameLen)
	default:
		why = fmt.Sprintf("%q has characters outside [a-z0-9._-]", name)
	}
	return &Error{Code: code, Path: field, Message: why}
}

// IsReservedHeader reports whether key is in the system's namespace: "rdq."
// in any letter case ("RDQ.x" too), since header names are case-insensitive
// in HTTP and in most languages that read them.
func IsReservedHeader(key string) bool {
	if len(key) < len(ReservedHeaderPrefix) {
		return false
	}
	for i := 0; i < len(ReservedHeaderPrefix); i++ {
		c := key[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != ReservedHeaderPrefix[i] {
			return false
		}
	}
	return true
}

// ValidateUserHeaders refuses, with RESERVED_HEADER, a header a user supplies
// whose key is reserved (IsReservedHeader). Keys are checked in sorted order,
// as the Rust codec does, so the error names the same key every time.
func ValidateUserHeaders(headers map[string]string) error {
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if IsReservedHeader(k) {
			return &Error{
				Code:    CodeReservedHeader,
				Path:    "headers." + k,
				Message: fmt.Sprintf("header %q uses the prefix %q, which is reserved for system metadata", k, ReservedHeaderPrefix),
			}
		}
	}
	return nil
}

// MaxFlowKeyLen is the longest flow key, in bytes.
const MaxFlowKeyLen = 128

// IsValidFlowKey reports whether key is 1–128 bytes of [A-Za-z0-9._:/@=+-]:
// a tenant id, an account, a host name, an API route.
func IsValidFlowKey(key string) bool {
	if key == "" || len(key) > MaxFlowKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '/' || c == '@' || c == '=' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}

// ValidateFlowKey refuses a bad flow key with INVALID_FIELD naming
// flow_key, as the server does.
func ValidateFlowKey(key string) error {
	if IsValidFlowKey(key) {
		return nil
	}
	var why string
	switch {
	case key == "":
		why = "must not be empty"
	case len(key) > MaxFlowKeyLen:
		why = fmt.Sprintf("is %d bytes long; the limit is %d", len(key), MaxFlowKeyLen)
	default:
		why = fmt.Sprintf("%q has characters outside [A-Za-z0-9._:/@=+-]", key)
	}
	return &Error{Code: CodeInvalidField, Path: "flow_key", Message: why}
}
