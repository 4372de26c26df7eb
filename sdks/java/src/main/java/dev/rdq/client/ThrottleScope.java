package dev.rdq.client;

/**
 * What a deferral also throttles ({@code "throttle"} of a {@code DEFER}
 * settle, {@code docs/flow-control.md}): nothing the throttle covers is
 * claimed before the deferral is due, on every worker and node.
 */
public enum ThrottleScope {
    /** The task's flow key; the whole queue for a task without one. */
    KEY("key"),
    /** The task's whole queue. */
    QUEUE("queue");

    private final String wireName;

    ThrottleScope(String wireName) {
        this.wireName = wireName;
    }

    /** The name on the wire: {@code key} or {@code queue}. */
    public String wireName() {
        return wireName;
    }
}
