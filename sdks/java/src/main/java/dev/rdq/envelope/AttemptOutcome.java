package dev.rdq.envelope;

/** How one recorded attempt ended (the {@code outcome} of an attempt record). */
public enum AttemptOutcome {
    /** The handler succeeded. */
    SUCCESS,
    /** The handler failed transiently; retried with backoff. */
    RETRYABLE_FAILURE,
    /** The handler failed for good; dead-lettered. */
    PERMANENT_FAILURE,
    /** The lease lapsed with no outcome reported (recorded by the engine only). */
    LEASE_EXPIRED;

    static AttemptOutcome parse(String s) {
        for (AttemptOutcome v : values()) {
            if (v.name().equals(s)) {
                return v;
            }
        }
        return null;
    }
}
