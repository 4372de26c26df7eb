package dev.rdq.envelope;

/** Where a task is in its life. */
public enum Status {
    /** Waiting to become due or to be claimed. */
    PENDING,
    /** Claimed by a worker under a lease. */
    IN_FLIGHT,
    /** Finished successfully (terminal). */
    SUCCEEDED,
    /** In the dead-letter queue (terminal until redriven). */
    DEAD;

    static Status parse(String s) {
        for (Status v : values()) {
            if (v.name().equals(s)) {
                return v;
            }
        }
        return null;
    }
}
