package dev.rdq.client;

import dev.rdq.json.JsonObject;
import java.time.Instant;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalDouble;

/**
 * A queue's flow-control state ({@code GET /v1/queues/{queue}/flow}, {@code
 * docs/flow-control.md}): its flow limits ({@code limits}, the policy's
 * {@code flow} section), the tokens left in its rate bucket (empty without a
 * rate), the whole-queue throttle ({@code blockedUntil}), the tasks in
 * flight, the busiest and the throttled flow keys (most in flight first, at
 * most 20), and how many claims the limits have cut short.
 */
public record QueueFlow(String queue, JsonObject limits, OptionalDouble tokens, Optional<Instant> blockedUntil,
        long inFlight, List<FlowKeyStatus> keys, long throttledClaims) {
    public QueueFlow {
        Objects.requireNonNull(queue, "queue");
        Objects.requireNonNull(limits, "limits");
        Objects.requireNonNull(tokens, "tokens");
        Objects.requireNonNull(blockedUntil, "blockedUntil");
        keys = List.copyOf(keys);
    }

    /** The status of flow key {@code key}, if {@link #keys()} lists it. */
    public Optional<FlowKeyStatus> key(String key) {
        for (FlowKeyStatus k : keys) {
            if (k.key().equals(key)) {
                return Optional.of(k);
            }
        }
        return Optional.empty();
    }
}
