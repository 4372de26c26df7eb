package dev.rdq.client;

import java.util.List;

/** What a redrive did (or, with {@code dryRun}, would do). */
public record RedriveResult(String queue, boolean dryRun, long count, List<String> ids) {}
