package dev.rdq.client;

import java.util.Objects;
import java.util.OptionalLong;

/**
 * One partition of a source ({@link SourceStatus#partitions()}): a Kafka
 * partition, a JetStream stream; an SQS source has one entry with an empty
 * name.
 *
 * @param partition a Kafka partition's number, a stream's name
 * @param cursor the position of the next record to ingest, as last known; empty until known
 * @param lag records behind the newest, as last measured; empty until measured
 */
public record SourcePartition(String partition, OptionalLong cursor, OptionalLong lag) {
    public SourcePartition {
        Objects.requireNonNull(partition, "partition");
        Objects.requireNonNull(cursor, "cursor");
        Objects.requireNonNull(lag, "lag");
    }
}
