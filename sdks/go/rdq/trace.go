package rdq

import (
	"context"
	"strings"
)

// TraceParentHeader is the W3C trace context header a submit's trace
// context travels in: the HTTP request header of a submit, and the user
// header of the envelope the server copies it into (docs/observability.md).
const TraceParentHeader = "traceparent"

type traceParentKey struct{}

// ContextWithTraceParent returns a copy of ctx that carries the W3C
// traceparent value, so the client's submits under it join that trace. The
// Worker gives every handler such a context with its task's traceparent, so
// follow-up submits from a handler continue the task's trace. An empty value
// hides any traceparent ctx carried before.
func ContextWithTraceParent(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceParentKey{}, traceparent)
}

// TraceParentFromContext returns the traceparent ContextWithTraceParent put
// in ctx, and false when there is none (or it was empty). The value is
// returned as given; a submit sends it only when it is well formed.
func TraceParentFromContext(ctx context.Context) (string, bool) {
	tp, _ := ctx.Value(traceParentKey{}).(string)
	return tp, tp != ""
}

// traceParentFor is the trace context a submit under ctx sends: the
// ClientConfig.TraceParent hook's answer when it is well formed, otherwise
// the one in ctx when it is, otherwise "" (nothing is sent).
func (c *Client) traceParentFor(ctx context.Context) string {
	if c.traceParent != nil {
		if tp, ok := wellFormedTraceParent(c.traceParent(ctx)); ok {
			return tp
		}
	}
	if tp, ok := TraceParentFromContext(ctx); ok {
		if tp, ok := wellFormedTraceParent(tp); ok {
			return tp
		}
	}
	return ""
}

// wellFormedTraceParent checks a W3C traceparent the way rdq serve parses
// it (docs/observability.md): version-traceid-spanid-flags, two, 32, 16 and
// two lower-case hex digits, version not ff, neither id all zeros; version
// 00 has nothing after the flags, a later version may have more fields
// ("-…"). Surrounding spaces and tabs are dropped; anything else outside
// visible ASCII is refused, so the value is always a valid header value.
func wellFormedTraceParent(s string) (string, bool) {
	s = strings.Trim(s, " \t")
	if len(s) < 55 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return "", false
		}
	}
	version, trace, span, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return "", false
	}
	if !lowerHex(version) || !lowerHex(trace) || !lowerHex(span) || !lowerHex(flags) {
		return "", false
	}
	switch {
	case version == "ff":
		return "", false
	case version == "00" && len(s) != 55:
		return "", false
	case len(s) > 55 && s[55] != '-':
		return "", false
	case strings.Trim(trace, "0") == "" || strings.Trim(span, "0") == "":
		return "", false
	}
	return s, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}
