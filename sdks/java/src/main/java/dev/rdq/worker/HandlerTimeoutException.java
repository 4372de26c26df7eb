package dev.rdq.worker;

import java.time.Duration;

/**
 * The failure of a handler that ran past its timeout ({@link
 * Worker.Builder#timeout}, {@link Handler#timeout()}). Its cause, when there
 * is one, is what the interrupted handler threw. Classified by the outcome
 * ladder like any exception: retryable unless a list, a wrapper in its cause
 * chain or the queue's globs say otherwise.
 */
public final class HandlerTimeoutException extends Exception {
    private static final long serialVersionUID = 1L;

    private final transient Duration timeout;

    HandlerTimeoutException(Duration timeout, Throwable cause) {
        super("the handler ran longer than its timeout of " + timeout.toMillis() + " ms", cause);
        this.timeout = timeout;
    }

    /** The timeout it ran past. */
    public Duration timeout() {
        return timeout;
    }
}
