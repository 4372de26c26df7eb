package dev.rdq.json;

/** JSON {@code true} or {@code false}. */
public enum JsonBoolean implements JsonValue {
    /** {@code true}. */
    TRUE,
    /** {@code false}. */
    FALSE;

    /** The JSON boolean for {@code value}. */
    public static JsonBoolean of(boolean value) {
        return value ? TRUE : FALSE;
    }

    /** This boolean as a Java boolean. */
    public boolean value() {
        return this == TRUE;
    }

    @Override
    public String typeName() {
        return "a boolean";
    }

    @Override
    public String toString() {
        return value() ? "true" : "false";
    }
}
