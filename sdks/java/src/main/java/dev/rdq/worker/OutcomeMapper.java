package dev.rdq.worker;

/**
 * Maps a handler's return value of type {@code R} and thrown error (one of
 * them is null, or both when a void handler returned) onto the canonical
 * outcome ({@code docs/outcomes.md}). Registered with a value handler, or for
 * a whole queue as an {@code OutcomeMapper<Object>}, it is authoritative: it
 * sits at the top of the ladder and replaces everything below it, and the
 * error it puts in a failure outcome is what the attempt history records.
 * Returning {@code null} hands the decision to the rest of the ladder.
 */
@FunctionalInterface
public interface OutcomeMapper<R> {
    /** The outcome for one call. */
    Outcome map(R returnValue, Throwable error);
}
