package dev.rdq;

import java.util.Optional;

/**
 * Every failure the SDK reports: a stable machine-readable {@link #code()}
 * (the same strings the server and the Rust codec use, such as
 * {@code RESERVED_HEADER} or {@code LEASE_LOST}), the path of the offending
 * field when there is one, and the HTTP status when the server answered.
 *
 * <p>Unchecked: a caller branches on {@code code()} where it can act, and
 * lets the rest propagate.
 */
public class RdqException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** The request did not complete within the client's request timeout. */
    public static final String TIMEOUT = "TIMEOUT";
    /** The server could not be reached, or the connection broke. */
    public static final String CONNECTION_FAILED = "CONNECTION_FAILED";
    /** The calling thread was interrupted while waiting for the server. */
    public static final String INTERRUPTED = "INTERRUPTED";
    /** The server answered something this SDK cannot read. */
    public static final String UNEXPECTED_RESPONSE = "UNEXPECTED_RESPONSE";

    private final String code;
    private final String field;
    private final int httpStatus;

    public RdqException(String code, String field, String message, int httpStatus, Throwable cause) {
        super(message, cause);
        this.code = code;
        this.field = field;
        this.httpStatus = httpStatus;
    }

    public RdqException(String code, String field, String message) {
        this(code, field, message, 0, null);
    }

    /** The stable code, e.g. {@code INVALID_QUEUE_NAME}, {@code TASK_NOT_FOUND}, {@code TIMEOUT}. */
    public String code() {
        return code;
    }

    /** The JSON path of the offending field ({@code headers.rdq.x}, {@code attempts[0].outcome}). */
    public Optional<String> field() {
        return Optional.ofNullable(field);
    }

    /** The HTTP status the server answered with; 0 when the error arose in the client. */
    public int httpStatus() {
        return httpStatus;
    }

    /** The explanation for people, without code or path. */
    public String detail() {
        return super.getMessage();
    }

    /** {@code CODE: path: message}, as the Rust codec and the CLI print errors. */
    @Override
    public String getMessage() {
        return field == null ? code + ": " + detail() : code + ": " + field + ": " + detail();
    }
}
