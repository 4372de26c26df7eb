package dev.rdq.json;

import java.util.List;

/** A JSON array; order is kept. */
public record JsonArray(List<JsonValue> items) implements JsonValue {
    public JsonArray {
        items = List.copyOf(items);
    }

    /** An array of these values. */
    public static JsonArray of(JsonValue... items) {
        return new JsonArray(List.of(items));
    }

    @Override
    public String typeName() {
        return "an array";
    }

    @Override
    public String toString() {
        return toJson();
    }
}
