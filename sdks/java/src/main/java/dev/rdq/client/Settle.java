package dev.rdq.client;

import dev.rdq.envelope.EnvelopeCodec;
import dev.rdq.envelope.ErrorInfo;
import dev.rdq.json.JsonWriter;
import java.util.Objects;

/** One settle of a batch: the task, its lease token, the outcome and what goes with it. */
public record Settle(String id, String leaseToken, SettleOutcome outcome, ErrorInfo error, Long deferMs) {
    public Settle {
        Objects.requireNonNull(id, "id");
        Objects.requireNonNull(leaseToken, "leaseToken");
        Objects.requireNonNull(outcome, "outcome");
    }

    public static Settle success(String id, String leaseToken) {
        return new Settle(id, leaseToken, SettleOutcome.SUCCESS, null, null);
    }

    public static Settle release(String id, String leaseToken) {
        return new Settle(id, leaseToken, SettleOutcome.RELEASE, null, null);
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
        w.endObject();
    }
}
