package dev.rdq.client;

import dev.rdq.envelope.EnvelopeCodec;
import dev.rdq.envelope.EnvelopeException;
import dev.rdq.envelope.ErrorCode;
import dev.rdq.envelope.ErrorInfo;
import dev.rdq.json.JsonWriter;
import java.util.Objects;

/**
 * One settle of a batch: the task, its lease token, the outcome and what goes
 * with it. {@code throttle}, with outcome {@code DEFER} only, also holds the
 * task's flow key ({@link ThrottleScope#KEY}) or its whole queue ({@link
 * ThrottleScope#QUEUE}) back until the deferral is due, on every worker and
 * node; another outcome with a throttle is refused with {@code INVALID_FIELD}
 * naming {@code throttle}.
 */
public record Settle(String id, String leaseToken, SettleOutcome outcome, ErrorInfo error, Long deferMs,
        ThrottleScope throttle) {
    public Settle {
        Objects.requireNonNull(id, "id");
        Objects.requireNonNull(leaseToken, "leaseToken");
        Objects.requireNonNull(outcome, "outcome");
        if (throttle != null && outcome != SettleOutcome.DEFER) {
            throw new EnvelopeException(ErrorCode.INVALID_FIELD, "throttle", "is for outcome DEFER only, not " + outcome);
        }
    }

    /** A settle that throttles nothing. */
    public Settle(String id, String leaseToken, SettleOutcome outcome, ErrorInfo error, Long deferMs) {
        this(id, leaseToken, outcome, error, deferMs, null);
    }

    public static Settle success(String id, String leaseToken) {
        return new Settle(id, leaseToken, SettleOutcome.SUCCESS, null, null);
    }

    public static Settle release(String id, String leaseToken) {
        return new Settle(id, leaseToken, SettleOutcome.RELEASE, null, null);
    }

    /** {@code DEFER}: due again after {@code deferMs}, no attempt spent. */
    public static Settle defer(String id, String leaseToken, long deferMs) {
        return new Settle(id, leaseToken, SettleOutcome.DEFER, null, deferMs);
    }

    /**
     * {@code DEFER} for {@code deferMs} that also throttles {@code scope}
     * until the task is due (a {@code null} scope throttles nothing).
     */
    public static Settle defer(String id, String leaseToken, long deferMs, ThrottleScope scope) {
        return new Settle(id, leaseToken, SettleOutcome.DEFER, null, deferMs, scope);
    }

    void write(JsonWriter w) {
        w.startObject();
        w.key("id").string(id);
        w.key("lease_token").string(leaseToken);
        w.key("outcome").string(outcome.name());
        if (error != null) {
            w.key("error");
            EnvelopeCodec.encodeErrorInto(error, w);
        }
        if (deferMs != null) {
            w.key("defer_ms").number(deferMs);
        }
        if (throttle != null) {
            w.key("throttle").string(throttle.wireName());
        }
        w.endObject();
    }
}
