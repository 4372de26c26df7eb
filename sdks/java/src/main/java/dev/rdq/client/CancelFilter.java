package dev.rdq.client;

import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * Which tasks {@link RdqClient#cancel} takes: PENDING ones become DEAD with
 * reason {@code CANCELLED}; running (IN_FLIGHT) ones are asked to stop,
 * unless {@link #pendingOnly(boolean) pendingOnly(true)}. The filters
 * combine; {@link #all()} takes every PENDING and running task of the queue,
 * so try {@link #dryRun(boolean) dryRun(true)} first. Each {@code with…}
 * method returns a new filter.
 *
 * @param ids only these tasks (null: no id filter)
 * @param handlerRef only tasks of this handler (null: any)
 * @param headers only tasks with every one of these headers (empty: any)
 * @param olderThan only tasks submitted longer ago than this (null: any age)
 * @param limit at most this many, oldest first (null: no limit)
 * @param dryRun report, change nothing
 * @param message why, recorded in each task's dead reason (null: "cancelled")
 * @param pendingOnly leave running tasks alone: cancel only PENDING ones
 */
public record CancelFilter(List<String> ids, String handlerRef, Map<String, String> headers, Duration olderThan,
        Long limit, boolean dryRun, String message, boolean pendingOnly) {

    /** Compact constructor: copies the collections. */
    public CancelFilter {
        ids = ids == null ? null : List.copyOf(ids);
        headers = headers == null ? Map.of() : Map.copyOf(headers);
    }

    /** A filter that also asks running tasks to stop (as before {@code pendingOnly} existed). */
    public CancelFilter(List<String> ids, String handlerRef, Map<String, String> headers, Duration olderThan,
            Long limit, boolean dryRun, String message) {
        this(ids, handlerRef, headers, olderThan, limit, dryRun, message, false);
    }

    /** Every PENDING and running task of the queue. */
    public static CancelFilter all() {
        return new CancelFilter(null, null, Map.of(), null, null, false, null, false);
    }

    /** These tasks. */
    public static CancelFilter ids(String... ids) {
        return all().withIds(List.of(ids));
    }

    /** Only these tasks. */
    public CancelFilter withIds(List<String> only) {
        return new CancelFilter(only, handlerRef, headers, olderThan, limit, dryRun, message, pendingOnly);
    }

    /** Only tasks of this handler. */
    public CancelFilter withHandler(String ref) {
        return new CancelFilter(ids, ref, headers, olderThan, limit, dryRun, message, pendingOnly);
    }

    /** Only tasks with every one of these headers. */
    public CancelFilter withHeaders(Map<String, String> only) {
        return new CancelFilter(ids, handlerRef, only, olderThan, limit, dryRun, message, pendingOnly);
    }

    /** Only tasks submitted longer ago than {@code age}. */
    public CancelFilter olderThan(Duration age) {
        return new CancelFilter(ids, handlerRef, headers, age, limit, dryRun, message, pendingOnly);
    }

    /** At most {@code max} tasks, oldest first. */
    public CancelFilter limit(long max) {
        return new CancelFilter(ids, handlerRef, headers, olderThan, max, dryRun, message, pendingOnly);
    }

    /** Report what would be cancelled, change nothing. */
    public CancelFilter dryRun(boolean dry) {
        return new CancelFilter(ids, handlerRef, headers, olderThan, limit, dry, message, pendingOnly);
    }

    /** Why, recorded in each task's dead reason (cut to 4 KiB). */
    public CancelFilter because(String why) {
        return new CancelFilter(ids, handlerRef, headers, olderThan, limit, dryRun, why, pendingOnly);
    }

    /** With true, running (IN_FLIGHT) tasks are left alone: only PENDING ones are cancelled. */
    public CancelFilter pendingOnly(boolean only) {
        return new CancelFilter(ids, handlerRef, headers, olderThan, limit, dryRun, message, only);
    }
}
