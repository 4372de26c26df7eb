package dev.rdq.envelope;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.support.Repo;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** The codec's default size limit is the Rust and Go codecs' limit: 1 MiB of canonical JSON. */
class SizeLimitTest {
    @Test
    @DisplayName("the default limit is 1 MiB, the same constant as crates/rdq-envelope and sdks/go/envelope")
    void default_limit_matches_the_other_codecs() throws Exception {
        assertEquals(1024 * 1024, EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES);
        String rust = Files.readString(Repo.root().resolve("crates/rdq-envelope/src/codec.rs"));
        String go = Files.readString(Repo.root().resolve("sdks/go/envelope/decode.go"));
        assertEquals(EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES,
                product(rust, "pub const DEFAULT_MAX_ENVELOPE_BYTES: usize = ([0-9 *]+);"));
        assertEquals(EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES, product(go, "const DefaultMaxBytes = ([0-9 *]+)\n"));
    }

    @Test
    @DisplayName("an envelope of exactly 1 MiB decodes with the default limit; one byte more is PAYLOAD_TOO_LARGE")
    void limit_is_inclusive() {
        byte[] exact = envelopeOfSize(EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES);
        assertEquals(EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES, exact.length);
        assertEquals(exact.length, EnvelopeCodec.decode(exact, EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES).encode().length);
        byte[] over = envelopeOfSize(EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES + 1);
        EnvelopeException e = assertThrows(EnvelopeException.class,
                () -> EnvelopeCodec.decode(over, EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES));
        assertEquals(ErrorCode.PAYLOAD_TOO_LARGE, e.errorCode());
        assertTrue(e.getMessage().contains("the limit is 1048576"), e.getMessage());
    }

    /** A canonical envelope of exactly {@code size} bytes, padded in a header value. */
    static byte[] envelopeOfSize(int size) {
        String head = "{\"envelope_version\":1,\"id\":\"01J2ZK7Q8XW5H3N9G4T6B8RDQ0\",\"queue\":\"q\",\"handler_ref\":\"h\","
                + "\"handler_version\":null,\"payload\":\"\",\"payload_content_type\":\"application/octet-stream\","
                + "\"headers\":{\"pad\":\"";
        String tail = "\"},\"status\":\"PENDING\",\"priority\":0,\"deferral_count\":0,\"attempt_count\":0,\"redrive_count\":0,"
                + "\"claim_count\":0,\"next_attempt_at\":\"2026-07-20T14:03:22.117Z\",\"lease_expires_at\":null,"
                + "\"created_at\":\"2026-07-20T14:03:22.117Z\",\"attempts\":[]}";
        char[] pad = new char[size - head.length() - tail.length()];
        Arrays.fill(pad, 'x');
        byte[] out = (head + new String(pad) + tail).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        // Canonical: encoding the decoded envelope gives the same bytes.
        assertEquals(new String(out, java.nio.charset.StandardCharsets.UTF_8),
                new String(EnvelopeCodec.decode(out).encode(), java.nio.charset.StandardCharsets.UTF_8));
        return out;
    }

    private static int product(String source, String regex) {
        Matcher m = Pattern.compile(regex).matcher(source);
        assertTrue(m.find(), "not found: " + regex);
        int n = 1;
        for (String f : m.group(1).split("\\*")) {
            n *= Integer.parseInt(f.trim());
        }
        return n;
    }
}
