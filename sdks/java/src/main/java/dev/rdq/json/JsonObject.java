package dev.rdq.json;

import java.util.Collections;
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
    public static final JsonObject EMPTY = new JsonObject(new Owned(false));

    public JsonObject {
        if (!(members instanceof Owned)) {
            members = Owned.copyOf(members);
        }
        members = Collections.unmodifiableSortedMap(members);
    }

    /**
     * A member map built inside this package and handed over whole (the
     * parser's): taken as it is, without the defensive copy. Only this
     * package can make one, and it never escapes unwrapped.
     *
     * <p>While no key holds a UTF-16 unit at or above U+D800, String's own
     * (UTF-16) order is code point order, and it is used: it is much
     * cheaper than the code point comparator, which the map switches to
     * ({@link #readyFor}) when such a key arrives.
     */
    static final class Owned extends TreeMap<String, JsonValue> {
        private static final long serialVersionUID = 1L;

        Owned(boolean codePointOrder) {
            super(codePointOrder ? Json.CODE_POINT_ORDER : null);
        }

        static Owned copyOf(Map<String, ? extends JsonValue> members) {
            boolean high = false;
            for (String k : members.keySet()) {
                if (needsCodePointOrder(k)) {
                    high = true;
                    break;
                }
            }
            Owned o = new Owned(high);
            o.putAll(members);
            return o;
        }

        /** This map, or a copy ordered by code point when {@code key} needs it and this map is not. */
        Owned readyFor(String key) {
            if (comparator() != null || !needsCodePointOrder(key)) {
                return this;
            }
            Owned o = new Owned(true);
            o.putAll(this);
            return o;
        }

        static boolean needsCodePointOrder(String key) {
            for (int i = 0; i < key.length(); i++) {
                if (key.charAt(i) >= 0xd800) {
                    return true;
                }
            }
            return false;
        }
    }

    /** An object with these members. */
    public static JsonObject of(Map<String, ? extends JsonValue> members) {
        return new JsonObject(Owned.copyOf(members));
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
