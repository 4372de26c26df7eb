package dev.rdq.client;

import dev.rdq.json.JsonWriter;
import java.time.Duration;
import java.util.List;
import java.util.Optional;

/**
 * A submit's uniqueness as set on its {@link SubmitRequest.Builder} ({@code
 * uniqueKey}, {@code uniqueKeyFrom}, {@code uniqueScope}, {@code uniqueHold},
 * {@code uniqueHoldFor}, {@code uniqueOnConflict}): the {@code unique} object
 * of {@code POST /v1/tasks}, gRPC's {@code UniqueOptions} ({@code
 * docs/uniqueness.md}). An option left unset is the server's default.
 */
public final class Unique {
    private final String key;
    private final List<String> keyFrom;
    private final UniqueScope scope;
    private final UniqueHold hold;
    private final Long holdMs;
    private final UniqueConflict onConflict;

    Unique(String key, List<String> keyFrom, UniqueScope scope, UniqueHold hold, Long holdMs,
            UniqueConflict onConflict) {
        this.key = key;
        this.keyFrom = List.copyOf(keyFrom);
        this.scope = scope;
        this.hold = hold;
        this.holdMs = holdMs;
        this.onConflict = onConflict;
    }

    /** The key, when given as is. */
    public Optional<String> key() {
        return Optional.ofNullable(key);
    }

    /** The JSON pointers the server derives the key from; empty when the key is given as is. */
    public List<String> keyFrom() {
        return keyFrom;
    }

    /** The scope; empty means the server's default, {@link UniqueScope#QUEUE}. */
    public Optional<UniqueScope> scope() {
        return Optional.ofNullable(scope);
    }

    /** The hold; empty means the server's default, {@link UniqueHold#UNTIL_FINISHED}. */
    public Optional<UniqueHold> hold() {
        return Optional.ofNullable(hold);
    }

    /** With {@link UniqueHold#FOR}: how long after the submit the task holds the key. */
    public Optional<Duration> holdFor() {
        return holdMs == null ? Optional.empty() : Optional.of(Duration.ofMillis(holdMs));
    }

    /** What a conflicting submit does; empty means the server's default, {@link UniqueConflict#RETURN}. */
    public Optional<UniqueConflict> onConflict() {
        return Optional.ofNullable(onConflict);
    }

    /** The {@code unique} member's value. */
    void write(JsonWriter w) {
        w.startObject();
        if (key != null) {
            w.key("key").string(key);
        }
        if (!keyFrom.isEmpty()) {
            w.key("key_from").startArray();
            for (String pointer : keyFrom) {
                w.string(pointer);
            }
            w.endArray();
        }
        if (scope != null) {
            w.key("scope").string(scope.wireName());
        }
        if (hold != null) {
            w.key("hold").string(hold.wireName());
        }
        if (holdMs != null) {
            w.key("hold_ms").number(holdMs);
        }
        if (onConflict != null) {
            w.key("on_conflict").string(onConflict.wireName());
        }
        w.endObject();
    }

    /** gRPC's {@code rdq.v1.UniqueOptions}. */
    rdq.v1.Api.UniqueOptions toProto() {
        rdq.v1.Api.UniqueOptions.Builder b = rdq.v1.Api.UniqueOptions.newBuilder().addAllKeyFrom(keyFrom);
        if (key != null) {
            b.setKey(key);
        }
        if (scope != null) {
            b.setScope(scope.wireName());
        }
        if (hold != null) {
            b.setHold(hold.wireName());
        }
        if (holdMs != null) {
            b.setHoldMs(holdMs);
        }
        if (onConflict != null) {
            b.setOnConflict(onConflict.wireName());
        }
        return b.build();
    }

    @Override
    public String toString() {
        JsonWriter w = new JsonWriter(64);
        write(w);
        return new String(w.toByteArray(), java.nio.charset.StandardCharsets.UTF_8);
    }
}
