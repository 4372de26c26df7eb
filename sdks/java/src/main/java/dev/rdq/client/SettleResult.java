package dev.rdq.client;

import dev.rdq.envelope.Envelope;
import java.util.Optional;

/**
 * The answer to one settle of a batch: HTTP-like {@code status} 200 with the
 * updated envelope, or an error {@code code} (409 {@code LEASE_LOST}, …).
 */
public record SettleResult(String id, int status, Envelope envelope, String code, String detail) {
    public boolean ok() {
        return status == 200;
    }

    public Optional<Envelope> settled() {
        return Optional.ofNullable(envelope);
    }
}
