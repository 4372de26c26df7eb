package dev.rdq.envelope;

/**
 * Bounded error text, as the Rust codec's {@code truncate.rs}: what is recorded
 * is cut so one noisy handler cannot bloat every copy of a task.
 */
public final class Truncate {
    /** Longest recorded error message, in UTF-8 bytes, marker included. */
    public static final int MAX_MESSAGE_BYTES = 4 * 1024;
    /** Longest recorded stack, in UTF-8 bytes, marker included. */
    public static final int MAX_STACK_BYTES = 64 * 1024;
    /** Appended to text that was cut (14 UTF-8 bytes). */
    public static final String TRUNCATION_MARKER = "\u2026[truncated]";

    private static final int MARKER_BYTES = Utf8.length(TRUNCATION_MARKER);

    private Truncate() {}

    /**
     * Cuts {@code text} to at most {@code maxBytes} UTF-8 bytes (marker
     * included) on a character boundary, ending in {@code …[truncated]} when
     * anything was removed.
     */
    public static String text(String text, int maxBytes) {
        if (Utf8.length(text) <= maxBytes) {
            return text;
        }
        return Utf8.prefix(text, Math.max(0, maxBytes - MARKER_BYTES)) + TRUNCATION_MARKER;
    }

    /** An error message as recorded in an attempt: at most 4 KiB. */
    public static String message(String message) {
        return text(message, MAX_MESSAGE_BYTES);
    }

    /** A stack as recorded in an attempt: at most 64 KiB. */
    public static String stack(String stack) {
        return text(stack, MAX_STACK_BYTES);
    }
}
