package dev.rdq.worker;

import dev.rdq.client.ThrottleScope;
import java.time.Duration;
import java.util.Optional;

/**
 * Thrown by a handler to run the task again after {@link #delay()} without
 * spending an attempt (outcome DEFER): "not now", not "failed". Its subclass
 * {@link ThrottleException} also throttles the task's flow key or queue.
 */
public class DeferException extends Exception {
    private static final long serialVersionUID = 1L;

    private final Duration delay;
    private final ThrottleScope throttle;

    public DeferException(Duration delay) {
        this(delay, null, "deferred by " + delay.toMillis() + " ms");
    }

    /** A deferral that also throttles {@code throttle} (nothing when {@code null}). */
    protected DeferException(Duration delay, ThrottleScope throttle, String message) {
        super(message);
        if (delay.isNegative()) {
            throw new IllegalArgumentException("a deferral cannot be negative");
        }
        this.delay = delay;
        this.throttle = throttle;
    }

    public Duration delay() {
        return delay;
    }

    /** What the deferral also throttles until it is due: empty for a plain deferral. */
    public Optional<ThrottleScope> throttle() {
        return Optional.ofNullable(throttle);
    }
}
