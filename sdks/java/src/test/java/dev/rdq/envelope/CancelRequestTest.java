package dev.rdq.envelope;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

@DisplayName("cancel_requested")
class CancelRequestTest {
    static final Instant ASKED = Instant.parse("2026-07-20T14:03:30.000Z");

    static byte[] fixture(String name) throws Exception {
        return DeadReasonTest.fixture(name);
    }

    static String text(Envelope env) {
        return DeadReasonTest.text(env);
    }

    @Test
    @DisplayName("a request built in Java encodes as rdq writes it (cancel_requested_running.json)")
    void built_request_encodes_as_rust_writes_it() throws Exception {
        Envelope running = EnvelopeCodec.decode(fixture("cancel_requested_null.json")).toBuilder()
                .cancelRequested(CancelRequest.of("ops@example.com", ASKED, "customer withdrew the order"))
                .build();
        assertEquals(new String(fixture("cancel_requested_running.json"), StandardCharsets.UTF_8), text(running));
        CancelRequest read = EnvelopeCodec.decode(fixture("cancel_requested_running.json")).cancelRequested().orElseThrow();
        assertEquals(running.cancelRequested().orElseThrow(), read);
        assertEquals(ASKED, read.at());
        assertEquals("ops@example.com", read.by());
        assertEquals("customer withdrew the order", read.message().orElseThrow());
        assertEquals("cancelled by ops@example.com: customer withdrew the order", read.toString());
    }

    @Test
    @DisplayName("it comes last, after dead_reason (cancel_requested_then_cancelled.json)")
    void comes_after_dead_reason() throws Exception {
        byte[] dead = fixture("cancel_requested_then_cancelled.json");
        Envelope env = EnvelopeCodec.decode(dead);
        assertArrayEquals(dead, env.encode());
        assertEquals(DeadReason.CANCELLED, env.deadReason().orElseThrow().code());
        assertEquals("ops@example.com", env.cancelRequested().orElseThrow().by());
        // Set in either order on a builder, written in the canonical one.
        Envelope rebuilt = env.toBuilder().cancelRequested(null).deadReason(null).build().toBuilder()
                .cancelRequested(env.cancelRequested().orElseThrow())
                .deadReason(env.deadReason().orElseThrow())
                .build();
        assertArrayEquals(dead, rebuilt.encode());
        String s = text(rebuilt);
        assertTrue(s.indexOf("\"dead_reason\"") < s.indexOf("\"cancel_requested\""), s);
        assertTrue(s.endsWith("\"message\":\"customer withdrew the order\"}}"), s);
    }

    @Test
    @DisplayName("an unset request is left out unless written as null; setting one on the builder drops the null")
    void unset_request_is_left_out_unless_written_as_null() throws Exception {
        Envelope fresh = Envelope.builder("q", "h").build();
        assertFalse(text(fresh).contains("cancel_requested"));
        assertTrue(fresh.cancelRequested().isEmpty());

        Envelope written = EnvelopeCodec.decode(fixture("cancel_requested_null.json"));
        assertTrue(written.cancelRequested().isEmpty());
        assertTrue(text(written).endsWith(",\"cancel_requested\":null}"), text(written));
        Envelope rewritten = written.toBuilder().cancelRequested(null).build();
        assertFalse(text(rewritten).contains("cancel_requested"), text(rewritten));
        // The two nulls are independent.
        Envelope both = EnvelopeCodec.decode(RustParityTest.with(",\"dead_reason\":null,\"cancel_requested\":null"));
        assertTrue(text(both).endsWith(",\"dead_reason\":null,\"cancel_requested\":null}"), text(both));
        Envelope one = both.toBuilder().deadReason(null).build();
        assertTrue(text(one).endsWith("\"created_at\":\"2026-07-20T14:03:22.117Z\",\"cancel_requested\":null}"), text(one));
    }

    @Test
    @DisplayName("a message left out stays out, unknown members are kept; a request built without one writes null")
    void message_left_out_and_unknown_members() throws Exception {
        byte[] in = fixture("cancel_requested_no_message_newer_member.json");
        Envelope env = EnvelopeCodec.decode(in);
        assertArrayEquals(in, env.encode());
        CancelRequest read = env.cancelRequested().orElseThrow();
        assertEquals("scheduler", read.by());
        assertTrue(read.message().isEmpty());
        assertEquals("cancelled by scheduler: no reason given", read.toString());
        assertEquals(new JsonNumber("1.50"), ((JsonObject) read.extra().get("node").orElseThrow()).get("n").orElseThrow());
        Envelope built = env.toBuilder().cancelRequested(CancelRequest.of("scheduler", read.at(), null)).build();
        assertTrue(text(built).endsWith("\"by\":\"scheduler\",\"message\":null}}"), text(built));
    }

    @Test
    @DisplayName("members in another order are written at, by, message (cancel_requested_pretty.json)")
    void members_are_ordered() throws Exception {
        Envelope env = EnvelopeCodec.decode(fixture("cancel_requested_pretty.json"));
        assertTrue(text(env).endsWith(
                ",\"cancel_requested\":{\"at\":\"2026-07-20T14:03:30.000Z\",\"by\":\"ops@example.com\",\"message\":null}}"),
                text(env));
    }

    @Test
    @DisplayName("CancelRequest.of refuses what a decoder refuses, with INVALID_FIELD and the path; the message is cut to 4 KiB")
    void of_refuses_what_a_decoder_refuses() {
        EnvelopeException empty = assertThrows(EnvelopeException.class, () -> CancelRequest.of("", ASKED, "m"));
        assertEquals("INVALID_FIELD", empty.code());
        assertEquals("cancel_requested.by", empty.field().orElseThrow());
        EnvelopeException late = assertThrows(EnvelopeException.class,
                () -> CancelRequest.of("ops", Instant.parse("+10000-01-01T00:00:00Z"), null));
        assertEquals("cancel_requested.at", late.field().orElseThrow());
        assertEquals(4096, CancelRequest.of("ops", ASKED, "x".repeat(5000)).message().orElseThrow()
                .getBytes(StandardCharsets.UTF_8).length);
        // Milliseconds only, as every timestamp of the envelope.
        assertEquals(Instant.parse("2026-07-20T14:03:30.123Z"),
                CancelRequest.of("ops", Instant.parse("2026-07-20T14:03:30.123456Z"), null).at());
    }
}
