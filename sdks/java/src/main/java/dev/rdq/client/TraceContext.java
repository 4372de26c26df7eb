package dev.rdq.client;

import java.util.Optional;
import java.util.function.Supplier;

/**
 * The W3C trace context ({@code traceparent}) of the current thread, so a
 * task joins its submitter's trace and a handler's follow-up submits
 * continue the task's trace ({@code docs/sdk-java.md}, "Tracing";
 * {@code docs/observability.md}).
 *
 * <p>By default {@link RdqClient} sends {@link #current()} with every
 * submit, and the {@code dev.rdq.worker.Worker} opens a scope holding the
 * task's {@code traceparent} header while its handler runs. The value lives
 * in a {@link ThreadLocal}, so it works the same on platform and virtual
 * threads; it is not inherited by threads a handler starts (open a scope
 * there, or pass the value along).
 *
 * <p>Only well-formed values are held: {@link #open(String)} with {@code
 * null} or a malformed value opens a scope with <em>no</em> trace context,
 * as W3C Trace Context asks of a receiver given an invalid header (start
 * afresh rather than propagate it).
 */
public final class TraceContext {
    /** The header (in the envelope and on the submit request) that carries the context. */
    public static final String HEADER = "traceparent";

    private static final ThreadLocal<String> CURRENT = new ThreadLocal<>();

    private TraceContext() {}

    /** The traceparent of the scope open on this thread, if any. */
    public static Optional<String> current() {
        return Optional.ofNullable(CURRENT.get());
    }

    /**
     * Makes {@code traceparent} this thread's trace context until the
     * returned scope is closed, which restores the previous one. Use it in a
     * try-with-resources on the thread that opened it; scopes nest. The
     * value is held as {@link #parse(String)} answers it; a {@code null} or
     * malformed value opens a scope with no trace context.
     */
    public static Scope open(String traceparent) {
        String previous = CURRENT.get();
        String value = parse(traceparent).orElse(null);
        if (value == null) {
            CURRENT.remove();
        } else {
            CURRENT.set(value);
        }
        return new Scope(previous);
    }

    /** Runs {@code body} with {@code traceparent} as this thread's context ({@link #open(String)}), then restores it. */
    public static void run(String traceparent, Runnable body) {
        Scope scope = open(traceparent);
        try {
            body.run();
        } finally {
            scope.close();
        }
    }

    /** Answers {@code body}'s value, computed with {@code traceparent} as this thread's context, then restores it. */
    public static <T> T call(String traceparent, Supplier<T> body) {
        Scope scope = open(traceparent);
        try {
            return body.get();
        } finally {
            scope.close();
        }
    }

    /**
     * True when {@code value} is a W3C traceparent {@link #parse(String)} accepts.
     */
    public static boolean isValid(String value) {
        return parse(value).isPresent();
    }

    /**
     * The well-formed traceparent in {@code value}, without surrounding
     * blanks (spaces, tabs), or empty. Well formed is what {@code rdq serve}
     * accepts: {@code version-traceid-parentid-flags} with 2, 32, 16 and 2
     * lower-case hex digits, neither id all zeros, version not {@code ff};
     * version {@code 00} has exactly these four fields, a later version may
     * carry more after a {@code -} (visible ASCII only, so it is a valid HTTP
     * header value), as the W3C recommendation allows.
     */
    public static Optional<String> parse(String value) {
        if (value == null) {
            return Optional.empty();
        }
        String v = trimBlanks(value);
        if (v.length() < 55 || v.charAt(2) != '-' || v.charAt(35) != '-' || v.charAt(52) != '-') {
            return Optional.empty();
        }
        if (!lowerHex(v, 0, 2) || !lowerHex(v, 3, 35) || !lowerHex(v, 36, 52) || !lowerHex(v, 53, 55)) {
            return Optional.empty();
        }
        if (zeros(v, 3, 35) || zeros(v, 36, 52) || v.startsWith("ff")) {
            return Optional.empty();
        }
        if (v.length() > 55) {
            if (v.startsWith("00") || v.charAt(55) != '-') {
                return Optional.empty();
            }
            for (int i = 56; i < v.length(); i++) {
                char c = v.charAt(i);
                if (c < 0x21 || c > 0x7e) {
                    return Optional.empty();
                }
            }
        }
        return Optional.of(v);
    }

    private static String trimBlanks(String s) {
        int from = 0;
        int to = s.length();
        while (from < to && (s.charAt(from) == ' ' || s.charAt(from) == '\t')) {
            from++;
        }
        while (to > from && (s.charAt(to - 1) == ' ' || s.charAt(to - 1) == '\t')) {
            to--;
        }
        return s.substring(from, to);
    }

    private static boolean lowerHex(String s, int from, int to) {
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
                return false;
            }
        }
        return true;
    }

    private static boolean zeros(String s, int from, int to) {
        for (int i = from; i < to; i++) {
            if (s.charAt(i) != '0') {
                return false;
            }
        }
        return true;
    }

    /** An open trace context; {@link #close()} restores the one before it (once; later calls do nothing). */
    public static final class Scope implements AutoCloseable {
        private final String previous;
        private boolean closed;

        private Scope(String previous) {
            this.previous = previous;
        }

        /** Restores the trace context that was current when this scope was opened. */
        @Override
        public void close() {
            if (closed) {
                return;
            }
            closed = true;
            if (previous == null) {
                CURRENT.remove();
            } else {
                CURRENT.set(previous);
            }
        }
    }
}
