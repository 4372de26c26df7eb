package dev.rdq.client;

import dev.rdq.RdqException;
import dev.rdq.UniqueHeldException;
import dev.rdq.envelope.Envelope;
import java.util.Optional;

/**
 * One item's answer in {@link RdqClient#submitBatch}: HTTP-like {@code
 * status} 201 (created now) or 200 (an earlier task answered: an idempotent
 * repeat, or a unique key's holder updated by {@link UniqueConflict#REPLACE}
 * or {@link UniqueConflict#DEBOUNCE}, or met with {@link
 * UniqueConflict#EXISTING}) with the stored envelope; else the
 * refusal's status and its {@link #error()} ({@link UniqueHeldException}
 * for {@code UNIQUE_HELD}). Items are independent: one refused leaves the
 * others stored.
 */
public final class SubmitResult {
    private final int status;
    private final Envelope envelope;
    private final RdqException error;

    SubmitResult(int status, Envelope envelope, RdqException error) {
        this.status = status;
        this.envelope = envelope;
        this.error = error;
    }

    /** 201, 200, or the status of the item's refusal (409 for {@code UNIQUE_HELD}). */
    public int status() {
        return status;
    }

    /** True when the item was stored or answered by an earlier task (it has an envelope). */
    public boolean ok() {
        return error == null;
    }

    /** True when the task was created by this item (201). */
    public boolean created() {
        return status == 201;
    }

    /** The stored task: the new one, or the earlier one that answered. */
    public Optional<Envelope> envelope() {
        return Optional.ofNullable(envelope);
    }

    /** Why the item was refused ({@link RdqException#code()}); empty when it was not. */
    public Optional<RdqException> error() {
        return Optional.ofNullable(error);
    }

    /** The envelope, or the item's refusal thrown. */
    public Envelope orThrow() {
        if (error != null) {
            throw error;
        }
        return envelope;
    }

    @Override
    public String toString() {
        return error != null ? "SubmitResult{" + status + ", " + error.getMessage() + "}"
                : "SubmitResult{" + status + ", " + envelope.id() + "}";
    }
}
