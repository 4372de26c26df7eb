package dev.rdq.json;

/**
 * A parsed JSON value. The SDK keeps JSON it does not interpret (unknown
 * envelope fields, error {@code detail}) in this model so that it survives a
 * decode and an encode unchanged: numbers keep the digits they were written
 * with, object keys are kept sorted by Unicode code point (the order of the
 * canonical encoding).
 */
public sealed interface JsonValue permits JsonNull, JsonBoolean, JsonNumber, JsonString, JsonArray, JsonObject {

    /** A short name of the JSON type, for error messages ("a string", "an object"). */
    String typeName();

    /** The compact encoding, as the canonical writer produces it. */
    default String toJson() {
        return Json.writeString(this);
    }
}
