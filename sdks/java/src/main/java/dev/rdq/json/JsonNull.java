package dev.rdq.json;

/** JSON {@code null}. */
public enum JsonNull implements JsonValue {
    /** The one null. */
    INSTANCE;

    @Override
    public String typeName() {
        return "null";
    }

    @Override
    public String toString() {
        return "null";
    }
}
