package dev.rdq;

import java.util.Objects;
import java.util.Optional;

/**
 * {@code UNIQUE_HELD}: the submit's unique key is held by another task,
 * and nothing was written ({@code docs/uniqueness.md}). HTTP 409 over HTTP,
 * {@code ABORTED} over gRPC; in a batch, the item's {@link
 * dev.rdq.client.SubmitResult#error()}. A redrive of a dead task whose key another task
 * holds is refused the same way.
 */
public final class UniqueHeldException extends RdqException {
    private static final long serialVersionUID = 1L;

    /** The code, {@code UNIQUE_HELD}. */
    public static final String CODE = "UNIQUE_HELD";

    private final String holder;
    private final String hold;

    /**
     * A refusal naming {@code holder} (the task that holds the key) and its
     * {@code hold} as the server wrote it (null when the answer did not say,
     * as a batch item over HTTP).
     */
    public UniqueHeldException(String holder, String hold, String detail, int httpStatus, Throwable cause) {
        super(CODE, null, detail, httpStatus, cause);
        this.holder = Objects.requireNonNull(holder, "holder");
        this.hold = hold;
    }

    /** The id of the task that holds the key. */
    public String holder() {
        return holder;
    }

    /**
     * The holder's hold in the server's text form: {@code until_started},
     * {@code until_finished}, {@code until_succeeded}, {@code forever}, or
     * {@code for:MILLIS}. Empty when the answer did not carry it.
     */
    public Optional<String> hold() {
        return Optional.ofNullable(hold);
    }
}
