package dev.rdq.client;

/**
 * What a submit of a held unique key does ({@code unique.on_conflict},
 * {@code docs/uniqueness.md}, "Conflicts").
 */
public enum UniqueConflict {
    /**
     * Nothing is written and the submit fails with {@link
     * dev.rdq.UniqueHeldException} ({@code UNIQUE_HELD}) naming the holder (the
     * server's default).
     */
    RETURN("return"),
    /**
     * A holder still PENDING takes the submit's payload, content type and
     * headers and keeps its id, due time and priority; the submit answers
     * the holder. A holder that runs or finished: {@code UNIQUE_HELD}.
     */
    REPLACE("replace"),
    /**
     * As {@link #REPLACE}, and the holder's due time becomes the submit's
     * (now plus its delay): a burst of submits runs once, after the last.
     */
    DEBOUNCE("debounce"),
    /**
     * Nothing is written; the submit answers the holder as an idempotent
     * repeat does, whatever its state. With a hold {@code forever} in the
     * queue's scope this is an idempotency key: the same key as {@code
     * idempotencyKey}.
     */
    EXISTING("existing");

    private final String wireName;

    UniqueConflict(String wireName) {
        this.wireName = wireName;
    }

    /**
     * The name on the wire: {@code return}, {@code replace}, {@code debounce}
     * or {@code existing}.
     */
    public String wireName() {
        return wireName;
    }
}
