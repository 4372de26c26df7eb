package dev.rdq.worker;

import dev.rdq.client.ThrottleScope;
import dev.rdq.envelope.ErrorInfo;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.time.Duration;
import java.util.Objects;
import java.util.Optional;

/**
 * The canonical outcome of one handler call ({@code docs/outcomes.md}): what an
 * {@link OutcomeMapper} answers, what a {@link ValueHandler} may return, and
 * what the worker reports to the server.
 */
public final class Outcome {
    /** The kinds of outcome a worker reports. */
    public enum Kind {
        /** Mark the task SUCCEEDED. */
        SUCCESS,
        /** Retry with backoff until {@code max_attempts}. */
        RETRYABLE_FAILURE,
        /** Dead-letter now. */
        PERMANENT_FAILURE,
        /** A failure nothing in the SDK classified: the queue's globs decide, default retryable. */
        UNCLASSIFIED_FAILURE,
        /** Run again after a delay; no attempt is spent. */
        DEFER
    }

    private static final Outcome SUCCESS = new Outcome(Kind.SUCCESS, null, null);

    private final Kind kind;
    private final ErrorInfo error;
    private final Duration deferDelay;
    private final ThrottleScope throttle;

    private Outcome(Kind kind, ErrorInfo error, Duration deferDelay) {
        this(kind, error, deferDelay, null);
    }

    private Outcome(Kind kind, ErrorInfo error, Duration deferDelay, ThrottleScope throttle) {
        this.kind = kind;
        this.error = error;
        this.deferDelay = deferDelay;
        this.throttle = throttle;
    }

    public static Outcome success() {
        return SUCCESS;
    }

    /** Retryable, recording {@code error}'s class name, message and stack. */
    public static Outcome retryable(Throwable error) {
        return new Outcome(Kind.RETRYABLE_FAILURE, errorOf(error), null);
    }

    /** Retryable, recording this error type and message. */
    public static Outcome retryable(String errorType, String message) {
        return new Outcome(Kind.RETRYABLE_FAILURE, ErrorInfo.of(errorType, message), null);
    }

    /** Retryable, recording exactly this error (with detail, if any). */
    public static Outcome retryable(ErrorInfo error) {
        return new Outcome(Kind.RETRYABLE_FAILURE, Objects.requireNonNull(error), null);
    }

    /** Permanent (straight to the DLQ), recording {@code error}'s class name, message and stack. */
    public static Outcome permanent(Throwable error) {
        return new Outcome(Kind.PERMANENT_FAILURE, errorOf(error), null);
    }

    /** Permanent, recording this error type and message. */
    public static Outcome permanent(String errorType, String message) {
        return new Outcome(Kind.PERMANENT_FAILURE, ErrorInfo.of(errorType, message), null);
    }

    /** Permanent, recording exactly this error. */
    public static Outcome permanent(ErrorInfo error) {
        return new Outcome(Kind.PERMANENT_FAILURE, Objects.requireNonNull(error), null);
    }

    /** A failure left to the queue's {@code non_retryable_errors} globs (default retryable). */
    public static Outcome unclassified(Throwable error) {
        return new Outcome(Kind.UNCLASSIFIED_FAILURE, errorOf(error), null);
    }

    /** A failure left to the queue's globs, recording exactly this error. */
    public static Outcome unclassified(ErrorInfo error) {
        return new Outcome(Kind.UNCLASSIFIED_FAILURE, Objects.requireNonNull(error), null);
    }

    /** Run the task again after {@code delay}, without spending an attempt. */
    public static Outcome defer(Duration delay) {
        if (delay.isNegative()) {
            throw new IllegalArgumentException("a deferral cannot be negative");
        }
        return new Outcome(Kind.DEFER, null, delay);
    }

    /**
     * DEFER for {@code delay} that also throttles {@code scope} until then,
     * on every worker and node: the task's flow key ({@link
     * ThrottleScope#KEY}; the whole queue for a task without one) or its
     * whole queue ({@link ThrottleScope#QUEUE}). A {@code null} scope is a
     * plain {@link #defer}.
     */
    public static Outcome throttled(Duration delay, ThrottleScope scope) {
        if (delay.isNegative()) {
            throw new IllegalArgumentException("a deferral cannot be negative");
        }
        return new Outcome(Kind.DEFER, null, delay, scope);
    }

    public Kind kind() {
        return kind;
    }

    /** The error recorded with a failure outcome. */
    public Optional<ErrorInfo> error() {
        return Optional.ofNullable(error);
    }

    /** The delay of a DEFER outcome. */
    public Optional<Duration> deferDelay() {
        return Optional.ofNullable(deferDelay);
    }

    /** What a DEFER outcome also throttles until it is due; empty for any other outcome or a plain deferral. */
    public Optional<ThrottleScope> throttle() {
        return Optional.ofNullable(throttle);
    }

    /**
     * The error rdq records for {@code t}: {@code type} = {@code t.getClass().getName()},
     * {@code message} = {@code t.getMessage()} (empty when null) cut at 4 KiB,
     * {@code stack} = {@code printStackTrace} (causes included) cut at 64 KiB.
     */
    public static ErrorInfo errorOf(Throwable t) {
        StringWriter sw = new StringWriter();
        try (PrintWriter pw = new PrintWriter(sw)) {
            t.printStackTrace(pw);
        }
        String message = t.getMessage();
        return ErrorInfo.of(t.getClass().getName(), message == null ? "" : message).withStack(sw.toString());
    }

    @Override
    public String toString() {
        return kind + (error != null ? " " + error : "") + (deferDelay != null ? " " + deferDelay : "")
                + (throttle != null ? " throttle " + throttle.wireName() : "");
    }
}
