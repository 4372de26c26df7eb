package dev.rdq.worker;

import dev.rdq.envelope.Envelope;

/**
 * A handler that signals its result through a return value (a boolean, a
 * status object). Without an {@link OutcomeMapper} any return is SUCCESS,
 * except a returned {@link Outcome}, which is taken as the per-call decision.
 */
@FunctionalInterface
public interface ValueHandler {
    /** Runs one task and answers what the function answered. */
    Object handle(Envelope task) throws Exception;
}
