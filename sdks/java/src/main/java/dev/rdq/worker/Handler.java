package dev.rdq.worker;

import java.time.Duration;

/**
 * A task handler ({@code docs/outcomes.md}): a normal return is SUCCESS, a thrown
 * exception is a failure classified by the outcome ladder ({@link OutcomeLadder}).
 * {@code T} is what the handler receives: the payload decoded into a class
 * ({@link Worker.Builder#handler(String, String, Class, Handler)}), or the whole
 * {@link dev.rdq.envelope.Envelope}. {@link TaskContext#current()} has the rest.
 *
 * <pre>{@code
 * record Charge(String account, long cents) {}
 *
 * worker.handler("billing", "charge", Charge.class, charge -> gateway.charge(charge.account(), charge.cents()));
 * }</pre>
 */
@FunctionalInterface
public interface Handler<T> {
    /** Runs one task. */
    void handle(T payload) throws Exception;

    /**
     * How long one call may run before the worker cancels it ({@link
     * CancelReason#TIMEOUT}); null (the default) for no limit but the lease.
     * A handler class overrides this; for a lambda use {@link
     * Worker.Builder#timeout(String, String, Duration)}.
     */
    default Duration timeout() {
        return null;
    }
}
