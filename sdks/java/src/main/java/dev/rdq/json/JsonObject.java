package dev.rdq.json;

import java.util.Map;
import java.util.Optional;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * A JSON object, its members sorted by key in Unicode code point order (the
 * order of the canonical encoding, which is UTF-8 byte order, not Java's
 * UTF-16 {@code String.compareTo}).
 */
public record JsonObject(SortedMap<String, JsonValue> members) implements JsonValue {
    /** The empty object. */
    public static final JsonObject EMPTY = new JsonObject(Members.EMPTY);

    public JsonObject {
        members = Members.copyOf(members);
    }

    /** An object with these members. */
    public static JsonObject of(Map<String, ? extends JsonValue> members) {
        return new JsonObject(Members.copyOf(members));
    }

    /** A builder for an object. */
    public static Builder builder() {
        return new Builder();
    }

    /** The member named {@code key}, if present. */
    public Optional<JsonValue> get(String key) {
        return Optional.ofNullable(members.get(key));
    }

    /** The string member named {@code key}, if present and a string. */
    public Optional<String> string(String key) {
        JsonValue v = members.get(key);
        return v instanceof JsonString s ? Optional.of(s.value()) : Optional.empty();
    }

    /** The integer member named {@code key}, if present and an integer that fits a long. */
    public Optional<Long> integer(String key) {
        JsonValue v = members.get(key);
        if (v instanceof JsonNumber n && n.isIntegral()) {
            try {
                return Optional.of(n.longValueExact());
            } catch (ArithmeticException e) {
                return Optional.empty();
            }
        }
        return Optional.empty();
    }

    /** True when there are no members. */
    public boolean isEmpty() {
        return members.isEmpty();
    }

    @Override
    public String typeName() {
        return "an object";
    }

    @Override
    public String toString() {
        return toJson();
    }

    /** Collects members; a later {@code put} of the same key replaces the earlier. */
    public static final class Builder {
        private final TreeMap<String, JsonValue> members = new TreeMap<>(Json.CODE_POINT_ORDER);

        private Builder() {}

        public Builder put(String key, JsonValue value) {
            members.put(key, value);
            return this;
        }

        public Builder put(String key, String value) {
            return put(key, new JsonString(value));
        }

        public Builder put(String key, long value) {
            return put(key, JsonNumber.of(value));
        }

        public Builder put(String key, boolean value) {
            return put(key, JsonBoolean.of(value));
        }

        /** Puts {@code value} unless it is null. */
        public Builder putIfPresent(String key, String value) {
            return value == null ? this : put(key, value);
        }

        public JsonObject build() {
            return new JsonObject(members);
        }
    }
}
