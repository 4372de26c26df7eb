//! Bounded error text: the engine cuts what it records so one noisy handler
//! cannot bloat every copy of a task.

/// Longest recorded error message, in bytes, marker included.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024;
/// Longest recorded stack, in bytes, marker included.
pub const MAX_STACK_BYTES: usize = 64 * 1024;
/// Appended to text that was cut.
pub const TRUNCATION_MARKER: &str = "…[truncated]";

/// Cuts `text` to at most `max_bytes` (marker included) on a UTF-8 boundary,
/// ending in `…[truncated]` when anything was removed.
pub fn truncate_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut cut = max_bytes.saturating_sub(TRUNCATION_MARKER.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(cut + TRUNCATION_MARKER.len());
    out.push_str(&text[..cut]);
    out.push_str(TRUNCATION_MARKER);
    out
}

/// An error message as recorded in an attempt: at most 4 KiB.
pub fn truncate_message(message: &str) -> String {
    truncate_text(message, MAX_MESSAGE_BYTES)
}

/// A stack as recorded in an attempt: at most 64 KiB.
pub fn truncate_stack(stack: &str) -> String {
    truncate_text(stack, MAX_STACK_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate_message("boom"), "boom");
        let exact = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(truncate_message(&exact), exact);
    }

    #[test]
    fn long_text_is_cut_to_the_limit_with_the_marker() {
        let long = "x".repeat(MAX_MESSAGE_BYTES + 1);
        let cut = truncate_message(&long);
        assert_eq!(cut.len(), MAX_MESSAGE_BYTES);
        assert!(cut.ends_with(TRUNCATION_MARKER));
        let stack = truncate_stack(&"y".repeat(100_000));
        assert_eq!(stack.len(), MAX_STACK_BYTES);
    }

    #[test]
    fn cuts_land_on_a_character_boundary() {
        // Four-byte characters straddle every possible cut point.
        for pad in 0..4 {
            let text = format!("{}{}", "a".repeat(pad), "🦀".repeat(2000));
            let cut = truncate_message(&text);
            assert!(cut.len() <= MAX_MESSAGE_BYTES);
            assert!(cut.ends_with(TRUNCATION_MARKER));
            let body = cut.strip_suffix(TRUNCATION_MARKER).unwrap();
            assert!(text.starts_with(body));
            assert!(body.len() > MAX_MESSAGE_BYTES - TRUNCATION_MARKER.len() - 4);
        }
    }
}
