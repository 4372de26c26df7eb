package dev.rdq.client;

import java.util.List;

/**
 * What a cancel did (or, with {@code dryRun}, would do).
 *
 * @param queue the queue
 * @param dryRun nothing was changed
 * @param count how many tasks were (or would be) cancelled
 * @param ids every task cancelled or asked to stop: oldest first for a filter, in the given order for ids
 * @param running those of {@code ids} that were running, asked to stop: they end DEAD with reason
 *     {@code CANCELLED} unless their handler succeeds first; the others were PENDING and are DEAD now
 */
public record CancelResult(String queue, boolean dryRun, long count, List<String> ids, List<String> running) {

    /** Compact constructor: copies the lists. */
    public CancelResult {
        ids = List.copyOf(ids);
        running = running == null ? List.of() : List.copyOf(running);
    }

    /** A result without running tasks. */
    public CancelResult(String queue, boolean dryRun, long count, List<String> ids) {
        this(queue, dryRun, count, ids, List.of());
    }
}
