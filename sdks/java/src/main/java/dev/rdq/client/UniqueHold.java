package dev.rdq.client;

/**
 * How long a task holds its unique key ({@code unique.hold}, {@code
 * docs/uniqueness.md}, "Holds"): an invariant over the holder's state,
 * judged when a conflicting submit arrives.
 */
public enum UniqueHold {
    /** While the holder is PENDING and was never claimed. */
    UNTIL_STARTED("until_started"),
    /** While the holder is PENDING or IN_FLIGHT (the server's default). */
    UNTIL_FINISHED("until_finished"),
    /** Until the holder SUCCEEDED, or is deleted (a DEAD holder keeps the key). */
    UNTIL_SUCCEEDED("until_succeeded"),
    /**
     * For a duration after the holder's submit, whatever its state: set it
     * with {@link SubmitRequest.Builder#uniqueHoldFor(java.time.Duration)}.
     */
    FOR("for"),
    /** As long as the holder is stored. */
    FOREVER("forever");

    private final String wireName;

    UniqueHold(String wireName) {
        this.wireName = wireName;
    }

    /** The name on the wire: {@code until_started}, {@code until_finished}, …. */
    public String wireName() {
        return wireName;
    }
}
