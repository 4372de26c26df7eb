package dev.rdq.envelope;

/** UTF-8 lengths and cuts of Java strings, as Rust's byte-indexed {@code str} sees them. */
final class Utf8 {
    private Utf8() {}

    /** Bytes of the UTF-8 encoding of {@code s} (a lone surrogate counts as the 3 bytes of U+FFFD). */
    static int length(String s) {
        int n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < 0x80) {
                n += 1;
            } else if (c < 0x800) {
                n += 2;
            } else if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                n += 4;
                i++;
            } else {
                n += 3;
            }
        }
        return n;
    }

    /**
     * The longest prefix of {@code s} whose UTF-8 encoding is at most
     * {@code maxBytes} long: a cut on a character boundary.
     */
    static String prefix(String s, int maxBytes) {
        int n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            int w;
            int chars = 1;
            if (c < 0x80) {
                w = 1;
            } else if (c < 0x800) {
                w = 2;
            } else if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                w = 4;
                chars = 2;
            } else {
                w = 3;
            }
            if (n + w > maxBytes) {
                return s.substring(0, i);
            }
            n += w;
            i += chars - 1;
        }
        return s;
    }

    /** {@code s} quoted as Rust's {@code {:?}} does for the common cases (quotes and backslashes escaped). */
    static String debugQuote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u{%x}", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }
}
