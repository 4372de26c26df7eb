package dev.rdq.envelope;

import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonValue;
import java.util.Objects;
import java.util.Optional;

/** The error recorded with a failed attempt: {@code type, message, detail, stack} plus unknown fields. */
public final class ErrorInfo {
    static final int DETAIL = 1;
    static final int STACK = 1 << 1;

    private final String type;
    private final String message;
    private final JsonValue detail;
    private final String stack;
    private final JsonObject extra;
    final int absent;

    ErrorInfo(String type, String message, JsonValue detail, String stack, JsonObject extra, int absent) {
        this.type = type;
        this.message = message;
        this.detail = detail;
        this.stack = stack;
        this.extra = extra;
        this.absent = absent;
    }

    /**
     * An error of {@code type} with {@code message} cut to 4 KiB, as rdq
     * records it. {@code type} must not be empty.
     */
    public static ErrorInfo of(String type, String message) {
        Objects.requireNonNull(type, "type");
        if (type.isEmpty()) {
            throw new EnvelopeException(ErrorCode.INVALID_FIELD, "error.type", "the error type must not be empty");
        }
        return new ErrorInfo(type, Truncate.message(message == null ? "" : message), null, null, JsonObject.EMPTY, 0);
    }

    /** This error with a stack, cut to 64 KiB. */
    public ErrorInfo withStack(String stack) {
        return new ErrorInfo(type, message, detail, stack == null ? null : Truncate.stack(stack), extra, absent & ~STACK);
    }

    /** This error with structured detail (any JSON). */
    public ErrorInfo withDetail(JsonValue detail) {
        return new ErrorInfo(type, message, detail, stack, extra, absent & ~DETAIL);
    }

    /** Language-native type name; classification globs match on it. */
    public String type() {
        return type;
    }

    /** What went wrong. */
    public String message() {
        return message;
    }

    /** Structured detail, e.g. from an {@code OutcomeMapper}. */
    public Optional<JsonValue> detail() {
        return Optional.ofNullable(detail);
    }

    /** The stack, when one was recorded. */
    public Optional<String> stack() {
        return Optional.ofNullable(stack);
    }

    /** Fields this version does not know, kept as written. */
    public JsonObject extra() {
        return extra;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ErrorInfo e && type.equals(e.type) && message.equals(e.message)
                && Objects.equals(detail, e.detail) && Objects.equals(stack, e.stack)
                && extra.equals(e.extra) && absent == e.absent;
    }

    @Override
    public int hashCode() {
        return Objects.hash(type, message, detail, stack, extra, absent);
    }

    @Override
    public String toString() {
        return type + ": " + message;
    }
}
