package dev.rdq.client;

import java.time.Instant;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalDouble;

/**
 * One flow key's state within its queue ({@link QueueFlow#keys()}): its tasks
 * in flight, the tokens left in its rate bucket (empty without a
 * {@code key_rate}), and when a throttle of the key ends (empty when it is
 * not throttled).
 */
public record FlowKeyStatus(String key, long inFlight, OptionalDouble tokens, Optional<Instant> blockedUntil) {
    public FlowKeyStatus {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(tokens, "tokens");
        Objects.requireNonNull(blockedUntil, "blockedUntil");
    }
}
