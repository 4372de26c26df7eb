package dev.rdq.envelope;

import dev.rdq.json.JsonObject;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;

/**
 * A cancel asked of a task while it ran (the envelope's {@code
 * cancel_requested}): {@code at, by, message} plus unknown fields. rdq sets
 * it when a running task is cancelled; the worker holding the lease is told,
 * and any outcome other than success then ends the task DEAD with reason
 * {@code CANCELLED}. Kept as history once the task has finished; removed by a
 * redrive.
 */
public final class CancelRequest {
    static final int MESSAGE = 1;

    private final Instant at;
    private final String by;
    private final String message;
    private final JsonObject extra;
    final int absent;

    CancelRequest(Instant at, String by, String message, JsonObject extra, int absent) {
        this.at = at;
        this.by = by;
        this.message = message;
        this.extra = extra;
        this.absent = absent;
    }

    /**
     * A request by {@code by} at {@code at}, with {@code message} (nullable)
     * cut to 4 KiB, as rdq records it. Refused with {@code INVALID_FIELD}
     * where a decoder would refuse it.
     */
    public static CancelRequest of(String by, Instant at, String message) {
        Objects.requireNonNull(by, "by");
        Objects.requireNonNull(at, "at");
        if (by.isEmpty()) {
            throw new EnvelopeException(ErrorCode.INVALID_FIELD, "cancel_requested.by", "who asked must not be empty");
        }
        return new CancelRequest(Timestamps.checked(at, "cancel_requested.at"), by,
                message == null ? null : Truncate.message(message), JsonObject.EMPTY, 0);
    }

    /** When the cancel was asked. */
    public Instant at() {
        return at;
    }

    /** Who asked: the name of the token that cancelled the task ({@code anonymous} on an open server). */
    public String by() {
        return by;
    }

    /** Why, for people; at most 4 KiB when recorded by rdq. */
    public Optional<String> message() {
        return Optional.ofNullable(message);
    }

    /** Fields this version does not know, kept as written. */
    public JsonObject extra() {
        return extra;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof CancelRequest r && at.equals(r.at) && by.equals(r.by) && Objects.equals(message, r.message)
                && extra.equals(r.extra) && absent == r.absent;
    }

    @Override
    public int hashCode() {
        return Objects.hash(at, by, message, extra, absent);
    }

    /**
     * {@code cancelled by <by>: <message>} ({@code no reason given} without
     * one): the message rdq's workers record with a handler they stopped.
     */
    @Override
    public String toString() {
        return "cancelled by " + by + ": " + (message == null ? "no reason given" : message);
    }
}
