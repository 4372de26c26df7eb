package dev.rdq.client;

/** Task counts of one queue by status. */
public record QueueCounts(String queue, long pending, long inFlight, long succeeded, long dead) {}
