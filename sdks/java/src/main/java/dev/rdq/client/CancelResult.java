package dev.rdq.client;

import java.util.List;

/** What a cancel did (or, with {@code dryRun}, would do): the tasks now DEAD with reason CANCELLED. */
public record CancelResult(String queue, boolean dryRun, long count, List<String> ids) {}
