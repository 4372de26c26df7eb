package dev.rdq.json;

import java.util.Objects;

/** A JSON string. */
public record JsonString(String value) implements JsonValue {
    public JsonString {
        Objects.requireNonNull(value, "value");
    }

    @Override
    public String typeName() {
        return "a string";
    }

    @Override
    public String toString() {
        return toJson();
    }
}
