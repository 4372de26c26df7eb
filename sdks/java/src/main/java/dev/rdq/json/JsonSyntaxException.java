package dev.rdq.json;

/** Input that is not one strict JSON document (see {@link Json#parse(byte[])}). */
public final class JsonSyntaxException extends Exception {
    private static final long serialVersionUID = 1L;

    JsonSyntaxException(String message, Throwable cause) {
        super(message, cause);
    }

    JsonSyntaxException(String message) {
        super(message);
    }
}
