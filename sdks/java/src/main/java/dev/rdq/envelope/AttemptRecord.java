package dev.rdq.envelope;

import dev.rdq.json.JsonObject;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;

/** One execution of a task: {@code attempt_no, started_at, finished_at, outcome, error} plus unknown fields. */
public final class AttemptRecord {
    static final int FINISHED_AT = 1;
    static final int OUTCOME = 1 << 1;
    static final int ERROR = 1 << 2;

    private final long attemptNo;
    private final Instant startedAt;
    private final Instant finishedAt;
    private final AttemptOutcome outcome;
    private final ErrorInfo error;
    private final JsonObject extra;
    final int absent;

    AttemptRecord(long attemptNo, Instant startedAt, Instant finishedAt, AttemptOutcome outcome, ErrorInfo error,
            JsonObject extra, int absent) {
        this.attemptNo = attemptNo;
        this.startedAt = startedAt;
        this.finishedAt = finishedAt;
        this.outcome = outcome;
        this.error = error;
        this.extra = extra;
        this.absent = absent;
    }

    /** A record with every field written (as rdq writes the records it creates). */
    public static AttemptRecord of(long attemptNo, Instant startedAt, Instant finishedAt, AttemptOutcome outcome,
            ErrorInfo error) {
        if (attemptNo < 1 || attemptNo > 0xffff_ffffL) {
            throw new EnvelopeException(ErrorCode.INVALID_FIELD, "attempt_no", "attempt numbers are 1 to 4294967295");
        }
        return new AttemptRecord(attemptNo, Timestamps.checked(startedAt, "started_at"),
                finishedAt == null ? null : Timestamps.checked(finishedAt, "finished_at"), outcome, error,
                JsonObject.EMPTY, 0);
    }

    /** 1-based number of this attempt within the task's whole history. */
    public long attemptNo() {
        return attemptNo;
    }

    /** When the attempt was claimed. */
    public Instant startedAt() {
        return startedAt;
    }

    /** When it ended; empty while in flight. */
    public Optional<Instant> finishedAt() {
        return Optional.ofNullable(finishedAt);
    }

    /** How it ended; empty while in flight. */
    public Optional<AttemptOutcome> outcome() {
        return Optional.ofNullable(outcome);
    }

    /** The failure, for failed attempts. */
    public Optional<ErrorInfo> error() {
        return Optional.ofNullable(error);
    }

    /** Fields this version does not know, kept as written. */
    public JsonObject extra() {
        return extra;
    }

    /** True while the attempt has no outcome. */
    public boolean isOpen() {
        return outcome == null;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof AttemptRecord a && attemptNo == a.attemptNo && startedAt.equals(a.startedAt)
                && Objects.equals(finishedAt, a.finishedAt) && outcome == a.outcome
                && Objects.equals(error, a.error) && extra.equals(a.extra) && absent == a.absent;
    }

    @Override
    public int hashCode() {
        return Objects.hash(attemptNo, startedAt, finishedAt, outcome, error, extra, absent);
    }

    @Override
    public String toString() {
        return "attempt " + attemptNo + " " + (outcome == null ? "open" : outcome.name());
    }
}
