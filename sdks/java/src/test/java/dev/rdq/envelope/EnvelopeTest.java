package dev.rdq.envelope;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class EnvelopeTest {
    static final String BASE = RustParityTest.BASE;

    @Test
    @DisplayName("numbers in unknown fields survive digit for digit, beyond long and double")
    void big_numbers_survive() {
        String doc = BASE + ",\"big\":18446744073709551616,\"nested\":{\"d\":0.1000000000000000000000001,"
                + "\"e\":[1e2,-0,1.50]},\"attempts\":[{\"attempt_no\":1,\"started_at\":\"2026-07-20T14:03:22.117Z\","
                + "\"x\":18446744073709551616,\"error\":{\"type\":\"t\",\"message\":\"m\",\"detail\":0.1000000000000000000000001,\"y\":1E+400}}]}";
        String canonical = BASE.replace("\"created_at\"", "\"created_at\"") ;
        byte[] in = doc.getBytes(StandardCharsets.UTF_8);
        Envelope env = EnvelopeCodec.decode(in);
        String out = new String(env.encode(), StandardCharsets.UTF_8);
        assertTrue(out.contains("\"big\":18446744073709551616"), out);
        assertTrue(out.contains("\"d\":0.1000000000000000000000001"), out);
        assertTrue(out.contains("\"e\":[1e+2,-0,1.50]"), out);
        assertTrue(out.contains("\"y\":1e+400"), out);
        assertTrue(out.contains("\"x\":18446744073709551616"), out);
        assertTrue(out.contains("\"detail\":0.1000000000000000000000001"), out);
        assertEquals(new JsonNumber("18446744073709551616"), env.extra().get("big").orElseThrow());
        assertArrayEquals(env.encode(), EnvelopeCodec.decode(env.encode()).encode());
        assertTrue(canonical.length() > 0);
    }

    @Test
    @DisplayName("messages are cut at 4 KiB and stacks at 64 KiB on a UTF-8 boundary with the marker")
    void truncation_matches_the_rust_rules() {
        assertEquals("boom", Truncate.message("boom"));
        String exact = "x".repeat(4096);
        assertEquals(exact, Truncate.message(exact));
        String cut = Truncate.message("x".repeat(4097));
        assertEquals(4096, cut.getBytes(StandardCharsets.UTF_8).length);
        assertTrue(cut.endsWith("…[truncated]"));
        assertEquals(65536, Truncate.stack("y".repeat(100_000)).getBytes(StandardCharsets.UTF_8).length);
        for (int pad = 0; pad < 4; pad++) {
            String text = "a".repeat(pad) + "🦀".repeat(2000);
            String c = Truncate.message(text);
            int len = c.getBytes(StandardCharsets.UTF_8).length;
            assertTrue(len <= 4096);
            String body = c.substring(0, c.length() - "…[truncated]".length());
            assertTrue(text.startsWith(body));
            assertTrue(body.getBytes(StandardCharsets.UTF_8).length > 4096 - 14 - 4);
        }
        // Two-byte characters: 4082 bytes of body leaves one 'é' straddling the cut.
        String two = Truncate.message("é".repeat(3000));
        assertEquals(4082 / 2 * 2 + 14, two.getBytes(StandardCharsets.UTF_8).length);
    }

    @Test
    @DisplayName("reserved headers are refused case-insensitively with RESERVED_HEADER and the path")
    void reserved_headers() {
        for (String key : new String[] {"rdq.source", "RDQ.x", "Rdq.y"}) {
            EnvelopeException e = assertThrows(EnvelopeException.class,
                    () -> Names.validateUserHeaders(Map.of(key, "v")));
            assertEquals("RESERVED_HEADER", e.code());
            assertEquals("headers." + key, e.field().orElseThrow());
        }
        Names.validateUserHeaders(Map.of("rdqx", "v", "x-rdq.y", "v"));
    }

    @Test
    @DisplayName("flow keys are 1-128 bytes of [A-Za-z0-9._:/@=+-], else INVALID_FIELD naming flow_key")
    void flow_keys() {
        Names.validateFlowKey("tenant-42");
        Names.validateFlowKey("acme.com/api:v2@eu=1+x_y");
        Names.validateFlowKey("k".repeat(128));
        for (String bad : new String[] {"", "has space", "\u00e9", "k".repeat(129), "new\nline"}) {
            EnvelopeException e = assertThrows(EnvelopeException.class, () -> Names.validateFlowKey(bad));
            assertEquals("INVALID_FIELD", e.code());
            assertEquals("flow_key", e.field().orElseThrow());
        }
    }

    @Test
    @DisplayName("a built envelope writes every field but payload_ref and decodes back equal")
    void builder_round_trips() {
        Envelope env = Envelope.builder("emails", "send-email").payload("hi".getBytes(StandardCharsets.UTF_8))
                .header("tenant", "acme").extra(JsonObject.builder().put("zz", 1).build()).build();
        Envelope back = EnvelopeCodec.decode(env.encode());
        assertEquals(env, back);
        String text = env.toString();
        assertTrue(text.contains("\"priority\":0,\"deferral_count\":0,\"attempt_count\":0"), text);
        assertTrue(!text.contains("payload_ref"), text);
        assertArrayEquals("hi".getBytes(StandardCharsets.UTF_8), back.payload());
        EnvelopeException bad = assertThrows(EnvelopeException.class, () -> Envelope.builder("Bad Queue", "h").build());
        assertEquals("INVALID_QUEUE_NAME", bad.code());
    }

    @Test
    @DisplayName("ULIDs generated in a burst are valid and strictly increasing")
    void ulids_increase() {
        String prev = Ulid.generate();
        for (int i = 0; i < 10_000; i++) {
            String next = Ulid.generate();
            assertTrue(Ulid.isValid(next), next);
            assertTrue(next.compareTo(prev) > 0, prev + " then " + next);
            prev = next;
        }
    }
}
