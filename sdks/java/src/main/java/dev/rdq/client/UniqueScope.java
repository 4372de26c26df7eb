package dev.rdq.client;

/**
 * Where a unique key is unique ({@code unique.scope}, {@code docs/uniqueness.md}).
 */
public enum UniqueScope {
    /** One holder per key in the queue (the server's default). */
    QUEUE("queue"),
    /** One holder per key and {@code handler_ref} in the queue. */
    HANDLER("handler");

    private final String wireName;

    UniqueScope(String wireName) {
        this.wireName = wireName;
    }

    /** The name on the wire: {@code queue} or {@code handler}. */
    public String wireName() {
        return wireName;
    }
}
