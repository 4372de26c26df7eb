package dev.rdq.client;

import dev.rdq.envelope.Envelope;
import java.util.List;
import java.util.Optional;

/** One page of a queue's DLQ, newest first, and the cursor of the next page. */
public record DeadPage(List<Envelope> items, Optional<String> nextCursor) {}
