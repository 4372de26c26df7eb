package dev.rdq.worker;

import dev.rdq.client.Settle;
import dev.rdq.envelope.ErrorInfo;
import dev.rdq.envelope.Timestamps;
import dev.rdq.json.Json;
import rdq.v1.Api;
import rdq.v1.EnvelopeOuterClass;

/** The SDK's values as the messages of {@code proto/rdq/v1/api.proto}, and back, for the Work stream. */
final class WorkMessages {
    private WorkMessages() {}

    /** The lease of a pushed task: its deadline minus its open attempt's start, as for an HTTP claim. */
    static long leaseOf(EnvelopeOuterClass.Envelope e) {
        int n = e.getAttemptsCount();
        if (!e.hasLeaseExpiresAt() || n == 0) {
            return 30_000;
        }
        Long expires = Timestamps.parseMillis(e.getLeaseExpiresAt());
        Long started = Timestamps.parseMillis(e.getAttempts(n - 1).getStartedAt());
        return expires == null || started == null ? 30_000 : Math.max(1, expires - started);
    }

    /** A settle as the Work stream's and {@code SettleBatch}'s message. */
    static Api.SettleRequest settle(Settle s) {
        Api.SettleRequest.Builder b = Api.SettleRequest.newBuilder().setId(s.id()).setLeaseToken(s.leaseToken());
        switch (s.outcome()) {
            case SUCCESS -> b.setOutcome(Api.ReportedOutcome.REPORTED_SUCCESS);
            case RETRYABLE_FAILURE -> b.setOutcome(Api.ReportedOutcome.REPORTED_RETRYABLE_FAILURE);
            case PERMANENT_FAILURE -> b.setOutcome(Api.ReportedOutcome.REPORTED_PERMANENT_FAILURE);
            case FAILURE -> b.setOutcome(Api.ReportedOutcome.REPORTED_FAILURE);
            case DEFER -> b.setOutcome(Api.ReportedOutcome.REPORTED_DEFER);
            case RELEASE -> b.setOutcome(Api.ReportedOutcome.REPORTED_RELEASE);
            default -> throw new IllegalStateException("unknown outcome " + s.outcome());
        }
        ErrorInfo e = s.error();
        if (e != null) {
            Api.ReportedError.Builder err = Api.ReportedError.newBuilder().setType(e.type()).setMessage(e.message());
            e.detail().ifPresent(d -> err.setDetailJson(Json.writeString(d)));
            e.stack().ifPresent(err::setStack);
            b.setError(err);
        }
        if (s.deferMs() != null) {
            b.setDeferMs(s.deferMs());
        }
        if (s.throttle() != null) {
            b.setThrottle(switch (s.throttle()) {
                case KEY -> Api.DeferThrottle.DEFER_THROTTLE_KEY;
                case QUEUE -> Api.DeferThrottle.DEFER_THROTTLE_QUEUE;
            });
        }
        return b.build();
    }
}
