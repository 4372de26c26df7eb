package dev.rdq.worker;

import dev.rdq.envelope.ErrorInfo;

/**
 * A per-call wrapper that forces a permanent failure: the task goes straight
 * to the DLQ whatever the lists and globs say. The error recorded is the
 * cause's (class name, message, stack) when there is one, else this
 * exception's message under {@code errorType} (default this class's name).
 *
 * <pre>{@code throw new PermanentException(cardDeclined);}</pre>
 */
public class PermanentException extends Exception {
    private static final long serialVersionUID = 1L;

    private final String errorType;

    public PermanentException(Throwable cause) {
        super(cause == null ? null : cause.getMessage(), cause);
        this.errorType = null;
    }

    public PermanentException(String message) {
        super(message);
        this.errorType = null;
    }

    public PermanentException(String message, Throwable cause) {
        super(message, cause);
        this.errorType = null;
    }

    /** A failure recorded under {@code errorType} (e.g. {@code billing.CardDeclined}). */
    public PermanentException(String errorType, String message) {
        super(message);
        this.errorType = errorType;
    }

    /** The error this wrapper records. */
    public ErrorInfo errorInfo() {
        return Wrappers.errorInfo(this, errorType);
    }
}
