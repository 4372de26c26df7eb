package dev.rdq.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;

/**
 * Strict JSON reading and the canonical JSON writer.
 *
 * <p>Reading accepts exactly what the Rust codec (serde_json) accepts: one
 * RFC 8259 document in strict UTF-8, no duplicate keys at any depth (compared
 * after unescaping), no lone-surrogate escapes, at most 127 nested
 * arrays/objects. Jackson's streaming parser
 * does the tokenising; the checks serde_json makes and Jackson does not are
 * made here.
 *
 * <p>Writing is serde_json's compact form byte for byte: {@code "} and
 * {@code \} escaped, {@code \b \t \n \f \r} for those controls, {@code \\u00xx}
 * (lower-case hex) for the other characters below U+0020, everything else
 * (including {@code /}, U+007F, U+2028 and all non-ASCII) as raw UTF-8. Numbers
 * keep every digit they were read with (serde_json's exact-number mode); only
 * the exponent marker is normalised to {@code e+}/{@code e-}.
 */
public final class Json {
    /** Most arrays/objects open at once; serde_json's recursion limit is 128. */
    static final int MAX_DEPTH = 127;

    /** Unicode code point order, which equals UTF-8 byte order (not UTF-16 order). */
    public static final Comparator<String> CODE_POINT_ORDER = Json::compareCodePoints;

    private static final JsonFactory FACTORY = JsonFactory.builder()
            .streamReadConstraints(StreamReadConstraints.builder()
                    .maxNestingDepth(Integer.MAX_VALUE)
                    .maxNumberLength(Integer.MAX_VALUE)
                    .maxStringLength(Integer.MAX_VALUE)
                    .maxNameLength(Integer.MAX_VALUE)
                    .build())
            // Canonicalized (not interned) names select Jackson's byte parser;
            // without hash-overflow failures, keys built to collide only slow it.
            .disable(JsonFactory.Feature.INTERN_FIELD_NAMES)
            .enable(JsonFactory.Feature.CANONICALIZE_FIELD_NAMES)
            .disable(JsonFactory.Feature.FAIL_ON_SYMBOL_HASH_OVERFLOW)
            .build();

    private Json() {}

    /** Parses one strict JSON document. */
    public static JsonValue parse(byte[] bytes) throws JsonSyntaxException {
        checkUtf8(bytes);
        if (bytes.length >= 3 && (bytes[0] & 0xff) == 0xef && (bytes[1] & 0xff) == 0xbb && (bytes[2] & 0xff) == 0xbf) {
            throw new JsonSyntaxException("expected value at line 1 column 1 (a byte order mark is not JSON)");
        }
        try (JsonParser p = FACTORY.createParser(bytes)) {
            JsonToken first = p.nextToken();
            if (first == null) {
                throw new JsonSyntaxException("EOF while parsing a value");
            }
            JsonValue value = read(p, first, 0);
            if (p.nextToken() != null) {
                throw new JsonSyntaxException("trailing characters after the document");
            }
            return value;
        } catch (JsonProcessingException e) {
            throw new JsonSyntaxException(e.getOriginalMessage(), e);
        } catch (IOException e) {
            throw new JsonSyntaxException(String.valueOf(e.getMessage()), e);
        }
    }

    /** Parses one strict JSON document from a string. */
    public static JsonValue parse(String text) throws JsonSyntaxException {
        return parse(text.getBytes(StandardCharsets.UTF_8));
    }

    /** Refuses anything but strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
    static void checkUtf8(byte[] bytes) throws JsonSyntaxException {
        int i = 0;
        int n = bytes.length;
        while (i < n) {
            int b = bytes[i];
            if (b >= 0) {
                i++;
                continue;
            }
            b &= 0xff;
            int need;
            int min;
            if (b >= 0xc2 && b <= 0xdf) {
                need = 1;
                min = 0x80;
            } else if (b >= 0xe0 && b <= 0xef) {
                need = 2;
                min = 0x800;
            } else if (b >= 0xf0 && b <= 0xf4) {
                need = 3;
                min = 0x10000;
            } else {
                throw new JsonSyntaxException("invalid UTF-8");
            }
            if (i + need >= n) {
                throw new JsonSyntaxException("invalid UTF-8");
            }
            int cp = b & (0x3f >> need);
            for (int k = 1; k <= need; k++) {
                int c = bytes[i + k] & 0xff;
                if ((c & 0xc0) != 0x80) {
                    throw new JsonSyntaxException("invalid UTF-8");
                }
                cp = (cp << 6) | (c & 0x3f);
            }
            if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                throw new JsonSyntaxException("invalid UTF-8");
            }
            i += need + 1;
        }
    }

    private static JsonValue read(JsonParser p, JsonToken t, int depth) throws IOException, JsonSyntaxException {
        switch (t) {
            case START_OBJECT: {
                if (depth + 1 > MAX_DEPTH) {
                    throw new JsonSyntaxException("recursion limit exceeded");
                }
                String[] keys = new String[8];
                JsonValue[] values = new JsonValue[8];
                int n = 0;
                JsonToken k;
                while ((k = p.nextToken()) == JsonToken.FIELD_NAME) {
                    String key = checked(p.currentName());
                    JsonValue value = read(p, p.nextToken(), depth + 1);
                    if (n == keys.length) {
                        keys = java.util.Arrays.copyOf(keys, n * 2);
                        values = java.util.Arrays.copyOf(values, n * 2);
                    }
                    keys[n] = key;
                    values[n] = value;
                    n++;
                }
                if (k != JsonToken.END_OBJECT) {
                    throw new JsonSyntaxException("unexpected token " + k);
                }
                return new JsonObject(Members.adopt(keys, values, n));
            }
            case START_ARRAY: {
                if (depth + 1 > MAX_DEPTH) {
                    throw new JsonSyntaxException("recursion limit exceeded");
                }
                List<JsonValue> items = new ArrayList<>();
                JsonToken i;
                while ((i = p.nextToken()) != JsonToken.END_ARRAY) {
                    if (i == null) {
                        throw new JsonSyntaxException("EOF while parsing a list");
                    }
                    items.add(read(p, i, depth + 1));
                }
                return new JsonArray(items);
            }
            case VALUE_STRING:
                return new JsonString(checked(p.getText()));
            case VALUE_NUMBER_INT:
            case VALUE_NUMBER_FLOAT:
                return new JsonNumber(p.getText());
            case VALUE_TRUE:
                return JsonBoolean.TRUE;
            case VALUE_FALSE:
                return JsonBoolean.FALSE;
            case VALUE_NULL:
                return JsonNull.INSTANCE;
            default:
                throw new JsonSyntaxException("unexpected token " + t);
        }
    }

    /** Refuses a string holding an unpaired surrogate (only a {@code \\u} escape can make one). */
    private static String checked(String s) throws JsonSyntaxException {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                    i++;
                    continue;
                }
                throw new JsonSyntaxException("lone leading surrogate in hex escape");
            }
            if (Character.isLowSurrogate(c)) {
                throw new JsonSyntaxException("unexpected end of hex escape (lone trailing surrogate)");
            }
        }
        return s;
    }

    /**
     * The canonical spelling of a number: its digits as written, the exponent
     * marker as a lower-case {@code e} with an explicit sign ({@code 1E5} and
     * {@code 1e5} become {@code 1e+5}).
     */
    static String canonicalNumber(String text) {
        int e = text.indexOf('e');
        if (e < 0) {
            e = text.indexOf('E');
        }
        if (e < 0) {
            return text;
        }
        char next = text.charAt(e + 1);
        String sign = next == '+' || next == '-' ? "" : "+";
        return text.substring(0, e) + "e" + sign + text.substring(e + 1);
    }

    /** True if {@code text} is exactly one JSON number token. */
    static boolean isNumberSyntax(String text) {
        int i = 0;
        int n = text.length();
        if (i < n && text.charAt(i) == '-') {
            i++;
        }
        if (i >= n) {
            return false;
        }
        if (text.charAt(i) == '0') {
            i++;
        } else if (text.charAt(i) >= '1' && text.charAt(i) <= '9') {
            while (i < n && isDigit(text.charAt(i))) {
                i++;
            }
        } else {
            return false;
        }
        if (i < n && text.charAt(i) == '.') {
            i++;
            int start = i;
            while (i < n && isDigit(text.charAt(i))) {
                i++;
            }
            if (i == start) {
                return false;
            }
        }
        if (i < n && (text.charAt(i) == 'e' || text.charAt(i) == 'E')) {
            i++;
            if (i < n && (text.charAt(i) == '+' || text.charAt(i) == '-')) {
                i++;
            }
            int start = i;
            while (i < n && isDigit(text.charAt(i))) {
                i++;
            }
            if (i == start) {
                return false;
            }
        }
        return i == n;
    }

    private static boolean isDigit(char c) {
        return c >= '0' && c <= '9';
    }

    static int compareCodePoints(String a, String b) {
        int n = Math.min(a.length(), b.length());
        for (int i = 0; i < n; i++) {
            char x = a.charAt(i);
            char y = b.charAt(i);
            if (x != y) {
                // Surrogates (astral characters) sort after U+E000..U+FFFF in code point order.
                if (x >= 0xd800 && y >= 0xd800) {
                    return fixup(x) - fixup(y);
                }
                return x - y;
            }
        }
        return a.length() - b.length();
    }

    private static int fixup(char c) {
        return c >= 0xe000 ? c - 0x800 : c + 0x2000;
    }

    // ------------------------------------------------------------------
    // Writing

    /** The compact encoding of {@code value}. */
    public static String writeString(JsonValue value) {
        JsonWriter w = new JsonWriter(64);
        w.value(value);
        return new String(w.toByteArray(), StandardCharsets.UTF_8);
    }

    /** The compact encoding of {@code value}, as UTF-8 bytes. */
    public static byte[] write(JsonValue value) {
        JsonWriter w = new JsonWriter(64);
        w.value(value);
        return w.toByteArray();
    }

    /** Writes {@code value} compactly into {@code w}. */
    static void writeValue(JsonWriter w, JsonValue value) {
        if (value instanceof JsonString s) {
            w.string(s.value());
        } else if (value instanceof JsonNumber n) {
            w.raw(canonicalNumber(n.text()));
        } else if (value instanceof JsonObject o) {
            w.startObject();
            for (Map.Entry<String, JsonValue> e : o.members().entrySet()) {
                w.key(e.getKey());
                writeValue(w, e.getValue());
            }
            w.endObject();
        } else if (value instanceof JsonArray a) {
            w.startArray();
            for (JsonValue item : a.items()) {
                writeValue(w, item);
            }
            w.endArray();
        } else if (value instanceof JsonBoolean b) {
            w.raw(b.value() ? "true" : "false");
        } else {
            w.raw("null");
        }
    }
}
