package dev.rdq.worker;

import dev.rdq.envelope.Envelope;

/**
 * A task handler ({@code docs/outcomes.md}): a normal return is SUCCESS, a thrown
 * exception is a failure classified by the outcome ladder ({@link OutcomeLadder}).
 *
 * <pre>{@code
 * public void handle(Envelope task) throws Exception {
 *     charge(task.payload());   // returns normally → SUCCESS
 * }
 * }</pre>
 */
@FunctionalInterface
public interface Handler {
    /** Runs one task. */
    void handle(Envelope task) throws Exception;
}
