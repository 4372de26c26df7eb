package dev.rdq.envelope;

import dev.rdq.json.JsonObject;
import java.time.Instant;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * Why a task is DEAD: {@code code, at, by, message} plus unknown fields. rdq
 * writes one on every transition to DEAD and removes it on redrive; codes
 * from newer writers are kept as written, so readers must expect codes beyond
 * the constants here.
 */
public final class DeadReason {
    /** A failure spent the last of the queue's {@code max_attempts} (a lapsed lease counts as one). */
    public static final String ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED";
    /** The handler's failure was permanent. */
    public static final String PERMANENT_FAILURE = "PERMANENT_FAILURE";
    /** The lease lapsed {@code max_lease_expiries} times: a handler that keeps killing its worker. */
    public static final String LEASE_EXPIRIES_EXHAUSTED = "LEASE_EXPIRIES_EXHAUSTED";
    /** Cancelled by an operator or a program. */
    public static final String CANCELLED = "CANCELLED";
    /** The task's {@code handler_version} differs from the worker's and the queue dead-letters such tasks. */
    public static final String HANDLER_VERSION_MISMATCH = "HANDLER_VERSION_MISMATCH";
    /** A counter reached its maximum, so the task could never run again. */
    public static final String COUNTERS_EXHAUSTED = "COUNTERS_EXHAUSTED";
    /** Every code rdq writes, for filters that refuse unknown ones. */
    public static final List<String> KNOWN_CODES = List.of(ATTEMPTS_EXHAUSTED, PERMANENT_FAILURE,
            LEASE_EXPIRIES_EXHAUSTED, CANCELLED, HANDLER_VERSION_MISMATCH, COUNTERS_EXHAUSTED);

    static final int MESSAGE = 1;

    private final String code;
    private final Instant at;
    private final String by;
    private final String message;
    private final JsonObject extra;
    final int absent;

    DeadReason(String code, Instant at, String by, String message, JsonObject extra, int absent) {
        this.code = code;
        this.at = at;
        this.by = by;
        this.message = message;
        this.extra = extra;
        this.absent = absent;
    }

    /**
     * The reason {@code code}, decided by {@code by} at {@code at}, with
     * {@code message} (nullable) cut to 4 KiB, as rdq records it. Refused with
     * {@code INVALID_FIELD} where a decoder would refuse it.
     */
    public static DeadReason of(String code, String by, Instant at, String message) {
        Objects.requireNonNull(code, "code");
        Objects.requireNonNull(by, "by");
        Objects.requireNonNull(at, "at");
        if (!isValidCode(code)) {
            throw new EnvelopeException(ErrorCode.INVALID_FIELD, "dead_reason.code",
                    Utf8.debugQuote(code) + " is not a reason code ([A-Z][A-Z0-9_], at most 64 bytes)");
        }
        if (by.isEmpty()) {
            throw new EnvelopeException(ErrorCode.INVALID_FIELD, "dead_reason.by", "who decided must not be empty");
        }
        return new DeadReason(code, Timestamps.checked(at, "dead_reason.at"), by,
                message == null ? null : Truncate.message(message), JsonObject.EMPTY, 0);
    }

    /** True when {@code code} is a well-formed reason code, known or not: {@code [A-Z][A-Z0-9_]*}, 1 to 64 bytes. */
    public static boolean isValidCode(String code) {
        if (code.isEmpty() || code.length() > 64 || code.charAt(0) < 'A' || code.charAt(0) > 'Z') {
            return false;
        }
        for (int i = 1; i < code.length(); i++) {
            char c = code.charAt(i);
            if (!(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_')) {
                return false;
            }
        }
        return true;
    }

    /** The cause: one of the constants of this class or a newer code. */
    public String code() {
        return code;
    }

    /** When the task became DEAD. */
    public Instant at() {
        return at;
    }

    /** Who or what decided: {@code worker} (a settle), {@code reaper} (a lapsed lease), or who cancelled it. */
    public String by() {
        return by;
    }

    /** Details for people, at most 4 KiB when recorded by rdq. */
    public Optional<String> message() {
        return Optional.ofNullable(message);
    }

    /** Fields this version does not know, kept as written. */
    public JsonObject extra() {
        return extra;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof DeadReason r && code.equals(r.code) && at.equals(r.at) && by.equals(r.by)
                && Objects.equals(message, r.message) && extra.equals(r.extra) && absent == r.absent;
    }

    @Override
    public int hashCode() {
        return Objects.hash(code, at, by, message, extra, absent);
    }

    @Override
    public String toString() {
        return message == null ? code + " by " + by : code + " by " + by + ": " + message;
    }
}
