package envelope

import "unicode/utf8"

// Limits on recorded error text, in bytes, the marker included: one noisy
// handler must not bloat every copy of a task.
const (
	MaxMessageBytes   = 4 * 1024
	MaxStackBytes     = 64 * 1024
	TruncationMarker  = "…[truncated]"
	truncMarkerLength = len(TruncationMarker)
)

// TruncateText cuts text to at most maxBytes (marker included) on a UTF-8
// boundary, ending in "…[truncated]" when anything was removed. It mirrors
// the Rust codec's truncate_text exactly.
func TruncateText(text string, maxBytes int) string {
	if len(text) <= maxBytes {
		return text
	}
	cut := maxBytes - truncMarkerLength
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + TruncationMarker
}

// TruncateMessage cuts an error message to 4 KiB.
func TruncateMessage(message string) string { return TruncateText(message, MaxMessageBytes) }

// TruncateStack cuts a stack to 64 KiB.
func TruncateStack(stack string) string { return TruncateText(stack, MaxStackBytes) }
