package dev.rdq.client;

import static dev.rdq.client.AnswerReads.optionalInteger;
import static dev.rdq.client.AnswerReads.optionalString;
import static dev.rdq.client.AnswerReads.unexpected;

import dev.rdq.RdqException;
import dev.rdq.json.JsonArray;
import dev.rdq.json.JsonBoolean;
import dev.rdq.json.JsonNull;
import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonValue;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * A source the server runs (a {@code [[sources]]} table of its
 * configuration file: a Kafka topic, a NATS JetStream stream or an SQS queue
 * whose records become tasks) and how it stands, as that server process
 * knows it: the counters count since it started ({@code GET
 * /v1/sources/{name}}, {@code docs/sources.md}, "Status").
 *
 * @param name the source's name, 1–120 characters of {@code [a-z0-9._-]}
 * @param kind where it reads
 * @param queue the queue its tasks go to
 * @param state how it stands
 * @param paused true while it does not read because of back-pressure (its queue above {@code high_water})
 * @param lag records in the source not yet ingested, as last measured; empty until measured
 * @param ingested records that became PENDING tasks
 * @param dead records kept as DEAD tasks (reason {@code UNDECODABLE_SOURCE})
 * @param duplicates records skipped because their task was already stored
 * @param rate records per second over the last 10 seconds
 * @param lastError the last failure (an unreachable server, a missing topic, a store error), kept after the
 *     source recovers
 * @param lastErrorAt when it happened
 * @param cursorsInStore true when the store keeps this source's cursors (capability {@code source_cursors})
 * @param partitions per Kafka partition or JetStream stream, where known
 */
public record SourceStatus(String name, Kind kind, String queue, State state, boolean paused, OptionalLong lag,
        long ingested, long dead, long duplicates, double rate, Optional<String> lastError,
        Optional<Instant> lastErrorAt, boolean cursorsInStore, List<SourcePartition> partitions) {

    public SourceStatus {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(kind, "kind");
        Objects.requireNonNull(queue, "queue");
        Objects.requireNonNull(state, "state");
        Objects.requireNonNull(lag, "lag");
        Objects.requireNonNull(lastError, "lastError");
        Objects.requireNonNull(lastErrorAt, "lastErrorAt");
        partitions = List.copyOf(partitions);
    }

    /** Where a source reads records. */
    public enum Kind {
        /** A Kafka topic. */
        KAFKA,
        /** A NATS JetStream stream. */
        NATS,
        /** An SQS queue. */
        SQS;

        /** The kind's JSON name: {@code kafka}, {@code nats}, {@code sqs}. */
        public String wire() {
            return name().toLowerCase(Locale.ROOT);
        }

        /** The kind of a JSON name; empty for one this SDK does not know. */
        public static Optional<Kind> fromWire(String s) {
            for (Kind k : values()) {
                if (k.wire().equals(s)) {
                    return Optional.of(k);
                }
            }
            return Optional.empty();
        }
    }

    /** How a source stands. */
    public enum State {
        /** Connecting, or reading its cursors. */
        STARTING,
        /** Reading. */
        RUNNING,
        /** Not reading: its queue went above {@code high_water} and has not yet fallen below {@code low_water}. */
        PAUSED,
        /** Its last step failed ({@link SourceStatus#lastError()}); it tries again after a wait. */
        RETRYING,
        /** The server is shutting down. */
        STOPPED;

        /** The state's JSON name: {@code starting}, {@code running}, … */
        public String wire() {
            return name().toLowerCase(Locale.ROOT);
        }

        /** The state of a JSON name; empty for one this SDK does not know. */
        public static Optional<State> fromWire(String s) {
            for (State st : values()) {
                if (st.wire().equals(s)) {
                    return Optional.of(st);
                }
            }
            return Optional.empty();
        }
    }

    /** The partition named {@code partition}, if {@link #partitions()} lists it. */
    public Optional<SourcePartition> partition(String partition) {
        for (SourcePartition p : partitions) {
            if (p.partition().equals(partition)) {
                return Optional.of(p);
            }
        }
        return Optional.empty();
    }

    // ------------------------------------------------------------------
    // Reading the server's JSON. Members this SDK does not know are ignored,
    // so a newer server may add some.

    /**
     * Refuses, before any request, a name the server would refuse: 1–120
     * characters of {@code [a-z0-9._-]}, not {@code .} or {@code ..} (which
     * no path can carry); {@code INVALID_ARGUMENT} naming {@code source}, as
     * the server answers.
     */
    static void checkName(String name) {
        Objects.requireNonNull(name, "name");
        boolean ok = !name.isEmpty() && name.length() <= 120 && !name.equals(".") && !name.equals("..");
        for (int i = 0; ok && i < name.length(); i++) {
            char c = name.charAt(i);
            ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        }
        if (!ok) {
            throw new RdqException("INVALID_ARGUMENT", "source",
                    "a source name is 1 to 120 characters of [a-z0-9._-], not \"" + name + "\"");
        }
    }

    /** A {@code SourceStatus} document. */
    static SourceStatus fromJson(JsonObject o) {
        String kindText = str(o, "kind");
        Kind kind = Kind.fromWire(kindText).orElseThrow(() -> unexpected("unknown source kind \"" + kindText + "\""));
        String stateText = str(o, "state");
        State state = State.fromWire(stateText)
                .orElseThrow(() -> unexpected("unknown source state \"" + stateText + "\""));
        List<SourcePartition> partitions = new ArrayList<>();
        JsonValue ps = o.get("partitions").orElse(JsonNull.INSTANCE);
        if (ps instanceof JsonArray a) {
            for (JsonValue v : a.items()) {
                if (!(v instanceof JsonObject p)) {
                    throw unexpected("expected an object in \"partitions\"");
                }
                partitions.add(new SourcePartition(str(p, "partition"), optionalInteger(p, "cursor"),
                        optionalInteger(p, "lag")));
            }
        } else if (ps != JsonNull.INSTANCE) {
            throw unexpected("expected an array \"partitions\"");
        }
        OptionalLong at = optionalInteger(o, "last_error_at_ms");
        return new SourceStatus(str(o, "name"), kind, str(o, "queue"), state, bool(o, "paused"),
                optionalInteger(o, "lag"), count(o, "ingested"), count(o, "dead"), count(o, "duplicates"),
                number(o, "rate"), optionalString(o, "last_error"),
                at.isPresent() ? Optional.of(Instant.ofEpochMilli(at.getAsLong())) : Optional.empty(),
                bool(o, "cursors_in_store"), partitions);
    }

    /** A counter: 0 when absent. */
    private static long count(JsonObject o, String key) {
        return optionalInteger(o, key).orElse(0L);
    }

    private static double number(JsonObject o, String key) {
        JsonValue v = o.get(key).orElse(JsonNull.INSTANCE);
        if (v instanceof JsonNumber n) {
            return n.bigDecimalValue().doubleValue();
        }
        if (v == JsonNull.INSTANCE) {
            return 0;
        }
        throw unexpected("expected a number \"" + key + "\", not " + v.toJson());
    }

    private static boolean bool(JsonObject o, String key) {
        JsonValue v = o.get(key).orElse(JsonNull.INSTANCE);
        if (v instanceof JsonBoolean b) {
            return b.value();
        }
        if (v == JsonNull.INSTANCE) {
            return false;
        }
        throw unexpected("expected a boolean \"" + key + "\", not " + v.toJson());
    }

    private static String str(JsonObject o, String key) {
        return optionalString(o, key).orElseThrow(() -> unexpected("a source without \"" + key + "\""));
    }

}
