package dev.rdq.worker;

import java.time.Duration;

/**
 * Thrown by a handler to run the task again after {@link #delay()} without
 * spending an attempt (outcome DEFER): "not now", not "failed".
 */
public class DeferException extends Exception {
    private static final long serialVersionUID = 1L;

    private final Duration delay;

    public DeferException(Duration delay) {
        super("deferred by " + delay.toMillis() + " ms");
        if (delay.isNegative()) {
            throw new IllegalArgumentException("a deferral cannot be negative");
        }
        this.delay = delay;
    }

    public Duration delay() {
        return delay;
    }
}
