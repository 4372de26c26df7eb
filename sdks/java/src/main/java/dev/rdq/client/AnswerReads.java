package dev.rdq.client;

import dev.rdq.RdqException;
import dev.rdq.json.JsonNull;
import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonString;
import dev.rdq.json.JsonValue;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * Reading members of the server's JSON answers (schedules, sources): each answers the member as its type, or
 * throws {@link RdqException#UNEXPECTED_RESPONSE} naming the member that is not what the API documents.
 */
final class AnswerReads {
    private AnswerReads() {}

    /** A string member; empty when absent or null. */
    static Optional<String> optionalString(JsonObject o, String key) {
        JsonValue v = o.get(key).orElse(JsonNull.INSTANCE);
        if (v == JsonNull.INSTANCE) {
            return Optional.empty();
        }
        if (v instanceof JsonString s) {
            return Optional.of(s.value());
        }
        throw unexpected("expected a string \"" + key + "\"");
    }

    /** An integer member that fits a {@code long}; empty when absent or null. */
    static OptionalLong optionalInteger(JsonObject o, String key) {
        JsonValue v = o.get(key).orElse(JsonNull.INSTANCE);
        if (v == JsonNull.INSTANCE) {
            return OptionalLong.empty();
        }
        if (v instanceof JsonNumber n && n.isIntegral()) {
            try {
                return OptionalLong.of(n.longValueExact());
            } catch (ArithmeticException e) {
                // Reported below.
            }
        }
        throw unexpected("expected an integer \"" + key + "\", not " + v.toJson());
    }

    /** The exception for an answer that is not what the API documents. */
    static RdqException unexpected(String why) {
        return new RdqException(RdqException.UNEXPECTED_RESPONSE, null, why, 0, null);
    }
}
