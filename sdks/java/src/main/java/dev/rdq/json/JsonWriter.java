package dev.rdq.json;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * A compact JSON writer into a byte buffer, with serde_json's string escaping
 * (see {@link Json}). Used for the canonical envelope encoding and for request
 * bodies; not thread-safe.
 */
public final class JsonWriter {
    private static final byte[] HEX = "0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

    private byte[] buf;
    private int len;
    /** One flag per open container: true until its first member is written. */
    private boolean[] first = new boolean[16];
    private int depth;
    /** Set after a key, so the value that follows writes no comma. */
    private boolean afterKey;

    public JsonWriter(int capacity) {
        buf = new byte[Math.max(16, capacity)];
    }

    /** The bytes written so far. */
    public byte[] toByteArray() {
        return Arrays.copyOf(buf, len);
    }

    /** Number of bytes written so far. */
    public int size() {
        return len;
    }

    private void ensure(int extra) {
        if (len + extra > buf.length) {
            buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + extra));
        }
    }

    private void put(int b) {
        ensure(1);
        buf[len++] = (byte) b;
    }

    private void beforeValue() {
        if (afterKey) {
            afterKey = false;
            return;
        }
        if (depth > 0) {
            if (first[depth - 1]) {
                first[depth - 1] = false;
            } else {
                put(',');
            }
        }
    }

    private void open(int c) {
        put(c);
        if (depth == first.length) {
            first = Arrays.copyOf(first, depth * 2);
        }
        first[depth++] = true;
    }

    public JsonWriter startObject() {
        beforeValue();
        open('{');
        return this;
    }

    public JsonWriter endObject() {
        depth--;
        put('}');
        return this;
    }

    public JsonWriter startArray() {
        beforeValue();
        open('[');
        return this;
    }

    public JsonWriter endArray() {
        depth--;
        put(']');
        return this;
    }

    /** Writes a member name (and the comma before it, if needed). */
    public JsonWriter key(String key) {
        if (first[depth - 1]) {
            first[depth - 1] = false;
        } else {
            put(',');
        }
        writeString(key);
        put(':');
        afterKey = true;
        return this;
    }

    public JsonWriter string(String s) {
        beforeValue();
        writeString(s);
        return this;
    }

    public JsonWriter number(long n) {
        beforeValue();
        writeAscii(Long.toString(n));
        return this;
    }

    public JsonWriter bool(boolean b) {
        beforeValue();
        writeAscii(b ? "true" : "false");
        return this;
    }

    public JsonWriter nullValue() {
        beforeValue();
        writeAscii("null");
        return this;
    }

    /** Writes a string, or {@code null} for a null reference. */
    public JsonWriter stringOrNull(String s) {
        return s == null ? nullValue() : string(s);
    }

    /** Writes any value from the JSON model. */
    public JsonWriter value(JsonValue v) {
        Json.writeValue(this, v);
        return this;
    }

    /** Writes ASCII text that is already one JSON token (a number, a literal). */
    JsonWriter raw(String token) {
        beforeValue();
        writeAscii(token);
        return this;
    }

    /** Writes bytes that are already one complete JSON value. */
    public JsonWriter rawValue(byte[] json) {
        beforeValue();
        ensure(json.length);
        System.arraycopy(json, 0, buf, len, json.length);
        len += json.length;
        return this;
    }

    private void writeAscii(String s) {
        int n = s.length();
        ensure(n);
        for (int i = 0; i < n; i++) {
            buf[len++] = (byte) s.charAt(i);
        }
    }

    private void writeString(String s) {
        int n = s.length();
        ensure(n + 2);
        buf[len++] = '"';
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (c < 0x80) {
                if (c >= 0x20 && c != '"' && c != '\\') {
                    ensure(1);
                    buf[len++] = (byte) c;
                    continue;
                }
                ensure(6);
                buf[len++] = '\\';
                switch (c) {
                    case '"': buf[len++] = '"'; break;
                    case '\\': buf[len++] = '\\'; break;
                    case '\b': buf[len++] = 'b'; break;
                    case '\t': buf[len++] = 't'; break;
                    case '\n': buf[len++] = 'n'; break;
                    case '\f': buf[len++] = 'f'; break;
                    case '\r': buf[len++] = 'r'; break;
                    default:
                        buf[len++] = 'u';
                        buf[len++] = '0';
                        buf[len++] = '0';
                        buf[len++] = HEX[c >> 4];
                        buf[len++] = HEX[c & 0xf];
                }
            } else if (c < 0x800) {
                ensure(2);
                buf[len++] = (byte) (0xc0 | (c >> 6));
                buf[len++] = (byte) (0x80 | (c & 0x3f));
            } else if (Character.isHighSurrogate(c) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1))) {
                int cp = Character.toCodePoint(c, s.charAt(++i));
                ensure(4);
                buf[len++] = (byte) (0xf0 | (cp >> 18));
                buf[len++] = (byte) (0x80 | ((cp >> 12) & 0x3f));
                buf[len++] = (byte) (0x80 | ((cp >> 6) & 0x3f));
                buf[len++] = (byte) (0x80 | (cp & 0x3f));
            } else {
                // A lone surrogate cannot be UTF-8; it is written as U+FFFD.
                char w = Character.isSurrogate(c) ? '\ufffd' : c;
                ensure(3);
                buf[len++] = (byte) (0xe0 | (w >> 12));
                buf[len++] = (byte) (0x80 | ((w >> 6) & 0x3f));
                buf[len++] = (byte) (0x80 | (w & 0x3f));
            }
        }
        ensure(1);
        buf[len++] = '"';
    }
}
