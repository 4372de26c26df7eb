package dev.rdq.worker;

import java.time.Duration;

/**
 * A handler that signals its result through a return value of type {@code R}
 * (a boolean, a status object). Without an {@link OutcomeMapper} any return is
 * SUCCESS, except a returned {@link Outcome}, which is taken as the per-call
 * decision; register it with a mapper of {@code R} to decide from the value
 * ({@link Worker.Builder#valueHandler(String, String, Class, ValueHandler, OutcomeMapper)}).
 */
@FunctionalInterface
public interface ValueHandler<T, R> {
    /** Runs one task and answers what the function answered. */
    R handle(T payload) throws Exception;

    /** As {@link Handler#timeout()}. */
    default Duration timeout() {
        return null;
    }
}
