package dev.rdq.worker;

import dev.rdq.client.ThrottleScope;
import java.time.Duration;
import java.util.Objects;

/**
 * Thrown by a handler that met back-pressure it cannot beat (an upstream's
 * {@code 429}, a tenant's quota): the task is deferred for {@link #delay()}
 * like a {@link DeferException}, no attempt spent, and its flow key ({@link
 * ThrottleScope#KEY}; the whole queue for a task without one) or its whole
 * queue ({@link ThrottleScope#QUEUE}) is throttled until then, on every
 * worker and node: nothing the throttle covers is claimed before the delay
 * has passed.
 *
 * <pre>{@code
 * throw new ThrottleException(Duration.ofSeconds(30));    // this task's flow key
 * throw ThrottleException.queue(Duration.ofMinutes(1));   // the whole queue
 * }</pre>
 *
 * <p>The queue's store must keep flow limits (capability {@code claim_flow});
 * on one that cannot, the settle is refused with {@code UNSUPPORTED} and the
 * task comes back when its lease runs out.
 */
public class ThrottleException extends DeferException {
    private static final long serialVersionUID = 1L;

    /** Defers the task and throttles its flow key (its queue, without one) for {@code delay}. */
    public ThrottleException(Duration delay) {
        this(delay, ThrottleScope.KEY);
    }

    /** Defers the task and throttles {@code scope} for {@code delay}. */
    public ThrottleException(Duration delay, ThrottleScope scope) {
        super(delay, Objects.requireNonNull(scope, "scope"),
                "throttled (" + scope.wireName() + ") for " + delay.toMillis() + " ms");
    }

    /** Defers the task and throttles its flow key (its queue, without one) for {@code delay}. */
    public static ThrottleException key(Duration delay) {
        return new ThrottleException(delay, ThrottleScope.KEY);
    }

    /** Defers the task and throttles its whole queue for {@code delay}. */
    public static ThrottleException queue(Duration delay) {
        return new ThrottleException(delay, ThrottleScope.QUEUE);
    }

    /** The scope throttled: {@link ThrottleScope#KEY} or {@link ThrottleScope#QUEUE}. */
    public ThrottleScope scope() {
        return throttle().orElseThrow();
    }
}
