package dev.rdq.worker;

import dev.rdq.envelope.ErrorInfo;

/**
 * A per-call wrapper that forces a retryable failure, overriding the
 * exception lists and the queue's globs. The error recorded is the cause's
 * when there is one.
 *
 * <pre>{@code throw new RetryableException(e);}</pre>
 */
public class RetryableException extends Exception {
    private static final long serialVersionUID = 1L;

    private final String errorType;

    public RetryableException(Throwable cause) {
        super(cause == null ? null : cause.getMessage(), cause);
        this.errorType = null;
    }

    public RetryableException(String message) {
        super(message);
        this.errorType = null;
    }

    public RetryableException(String message, Throwable cause) {
        super(message, cause);
        this.errorType = null;
    }

    /** A failure recorded under {@code errorType}. */
    public RetryableException(String errorType, String message) {
        super(message);
        this.errorType = errorType;
    }

    /** The error this wrapper records. */
    public ErrorInfo errorInfo() {
        return Wrappers.errorInfo(this, errorType);
    }
}
