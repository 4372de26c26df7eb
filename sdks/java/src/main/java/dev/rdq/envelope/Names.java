package dev.rdq.envelope;

import java.util.Map;

/** Rules for queue names, handler refs and user headers (as the Rust codec's {@code names.rs}). */
public final class Names {
    /** Longest queue name or handler ref, in bytes. */
    public static final int MAX_NAME_LEN = 240;
    /** Prefix reserved for headers the system sets ({@code rdq.source}, {@code rdq.submitted_by}). */
    public static final String RESERVED_HEADER_PREFIX = "rdq.";

    private Names() {}

    /**
     * True if {@code name} is 1–240 characters of {@code [a-z0-9._-]}, other
     * than {@code .} and {@code ..} (names end up in URL paths and file names,
     * where those two mean "here" and "up").
     */
    public static boolean isValidName(String name) {
        if (name.isEmpty() || name.length() > MAX_NAME_LEN || isDotSegment(name)) {
            return false;
        }
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) {
                return false;
            }
        }
        return true;
    }

    /** Refuses a bad queue name with {@code INVALID_QUEUE_NAME}. */
    public static void validateQueueName(String name) {
        check(name, ErrorCode.INVALID_QUEUE_NAME, "queue");
    }

    /** Refuses a bad handler ref with {@code INVALID_HANDLER_REF}. */
    public static void validateHandlerRef(String name) {
        check(name, ErrorCode.INVALID_HANDLER_REF, "handler_ref");
    }

    private static void check(String name, ErrorCode code, String field) {
        if (isValidName(name)) {
            return;
        }
        int bytes = Utf8.length(name);
        String why;
        if (name.isEmpty()) {
            why = "must not be empty";
        } else if (isDotSegment(name)) {
            why = Utf8.debugQuote(name) + " is a path segment, not a name";
        } else if (bytes > MAX_NAME_LEN) {
            why = "is " + bytes + " bytes long; the limit is " + MAX_NAME_LEN;
        } else {
            why = Utf8.debugQuote(name) + " has characters outside [a-z0-9._-]";
        }
        throw new EnvelopeException(code, field, why);
    }

    /** Longest flow key, in bytes. */
    public static final int MAX_FLOW_KEY_LEN = 128;

    /** The system header that carries a task's flow key. */
    public static final String FLOW_KEY_HEADER = "rdq.flow_key";

    /**
     * True if {@code key} is 1-128 bytes of {@code [A-Za-z0-9._:/@=+-]}: a
     * tenant id, an account, a host name, an API route.
     */
    public static boolean isValidFlowKey(String key) {
        if (key.isEmpty() || key.length() > MAX_FLOW_KEY_LEN) {
            return false;
        }
        for (int i = 0; i < key.length(); i++) {
            char c = key.charAt(i);
            boolean ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                    || c == '.' || c == '_' || c == ':' || c == '/' || c == '@' || c == '=' || c == '+' || c == '-';
            if (!ok) {
                return false;
            }
        }
        return true;
    }

    /** Refuses a bad flow key with {@code INVALID_FIELD} naming {@code flow_key}, as the server does. */
    public static void validateFlowKey(String key) {
        if (isValidFlowKey(key)) {
            return;
        }
        int bytes = Utf8.length(key);
        String why;
        if (key.isEmpty()) {
            why = "must not be empty";
        } else if (bytes > MAX_FLOW_KEY_LEN) {
            why = "is " + bytes + " bytes long; the limit is " + MAX_FLOW_KEY_LEN;
        } else {
            why = Utf8.debugQuote(key) + " has characters outside [A-Za-z0-9._:/@=+-]";
        }
        throw new EnvelopeException(ErrorCode.INVALID_FIELD, "flow_key", why);
    }

    private static boolean isDotSegment(String name) {
        return name.equals(".") || name.equals("..");
    }

    /**
     * True if header {@code key} is in the reserved namespace: {@code rdq.} in
     * any ASCII case ({@code RDQ.x}, {@code Rdq.submitted_by}), since header
     * names are case-insensitive in HTTP and most languages that read them.
     */
    public static boolean isReservedHeader(String key) {
        if (key.length() < RESERVED_HEADER_PREFIX.length()) {
            return false;
        }
        for (int i = 0; i < RESERVED_HEADER_PREFIX.length(); i++) {
            char c = key.charAt(i);
            char lower = c >= 'A' && c <= 'Z' ? (char) (c + 32) : c;
            if (lower != RESERVED_HEADER_PREFIX.charAt(i)) {
                return false;
            }
        }
        return true;
    }

    /** Refuses user headers that use the reserved prefix, in any case, with {@code RESERVED_HEADER}. */
    public static void validateUserHeaders(Map<String, String> headers) {
        for (String key : headers.keySet()) {
            if (isReservedHeader(key)) {
                throw new EnvelopeException(ErrorCode.RESERVED_HEADER, "headers." + key,
                        "header " + Utf8.debugQuote(key) + " uses the prefix \"rdq.\", which is reserved for system metadata");
            }
        }
    }
}
