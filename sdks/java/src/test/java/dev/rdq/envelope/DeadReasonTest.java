package dev.rdq.envelope;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.support.Repo;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.time.Instant;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

@DisplayName("dead_reason")
class DeadReasonTest {
    static byte[] fixture(String name) throws Exception {
        return Files.readAllBytes(Repo.fixtures().resolve("valid").resolve(name));
    }

    static String text(Envelope env) {
        return new String(env.encode(), StandardCharsets.UTF_8);
    }

    @Test
    @DisplayName("a reason built in Java encodes as rdq writes it (dead_reason_permanent.json)")
    void built_reason_encodes_as_rust_writes_it() throws Exception {
        // The pending task of dead_reason_null.json, whose writer left handler_version
        // out (only a decoded envelope can remember that), fails permanently.
        Envelope pending = EnvelopeCodec.decode(fixture("dead_reason_null.json"));
        Instant started = pending.createdAt().plus(Duration.ofMillis(83));
        Instant finished = started.plus(Duration.ofMillis(750));
        ErrorInfo cause = ErrorInfo.of("app.InvalidCard", "card 4242 was declined");
        Envelope dead = pending.toBuilder()
                .status(Status.DEAD)
                .attemptCount(1)
                .claimCount(1)
                .nextAttemptAt(null)
                .addAttempt(AttemptRecord.of(1, started, finished, AttemptOutcome.PERMANENT_FAILURE, cause))
                .deadReason(DeadReason.of(DeadReason.PERMANENT_FAILURE, "worker", finished,
                        cause.type() + ": " + cause.message()))
                .build();
        assertEquals(new String(fixture("dead_reason_permanent.json"), StandardCharsets.UTF_8), text(dead));
    }

    @Test
    @DisplayName("an unset reason is left out unless written as null; setting one on the builder drops the null")
    void unset_reason_is_left_out_unless_written_as_null() throws Exception {
        assertFalse(text(Envelope.builder("q", "h").build()).contains("dead_reason"));

        Envelope written = EnvelopeCodec.decode(fixture("dead_reason_null.json"));
        assertTrue(written.deadReason().isEmpty());
        assertTrue(text(written).endsWith(",\"dead_reason\":null}"), text(written));
        Envelope rewritten = written.toBuilder().deadReason(null).build();
        assertFalse(text(rewritten).contains("dead_reason"), text(rewritten));
    }

    @Test
    @DisplayName("a message left out stays out; a reason built without one writes null")
    void message_left_out_stays_out() {
        byte[] in = RustParityTest.with(",\"dead_reason\":{\"code\":\"CANCELLED\",\"at\":\"2026-07-20T14:03:22.117Z\",\"by\":\"ops\"}");
        Envelope env = EnvelopeCodec.decode(in);
        assertArrayEquals(in, env.encode());
        DeadReason read = env.deadReason().orElseThrow();
        assertEquals(DeadReason.CANCELLED, read.code());
        assertEquals("ops", read.by());
        assertTrue(read.message().isEmpty());
        Envelope built = env.toBuilder().deadReason(DeadReason.of(DeadReason.CANCELLED, "ops", read.at(), null)).build();
        assertTrue(text(built).endsWith("\"by\":\"ops\",\"message\":null}}"), text(built));
    }

    @Test
    @DisplayName("DeadReason.of refuses what a decoder refuses, with INVALID_FIELD and the path")
    void of_refuses_what_a_decoder_refuses() {
        Instant at = Instant.parse("2026-07-20T14:03:22.117Z");
        String[][] cases = {
            {"cancelled", "ops", "dead_reason.code"},
            {"A".repeat(65), "ops", "dead_reason.code"},
            {"", "ops", "dead_reason.code"},
            {DeadReason.CANCELLED, "", "dead_reason.by"},
        };
        for (String[] c : cases) {
            EnvelopeException e = assertThrows(EnvelopeException.class, () -> DeadReason.of(c[0], c[1], at, "m"));
            assertEquals("INVALID_FIELD", e.code());
            assertEquals(c[2], e.field().orElseThrow());
        }
        EnvelopeException late = assertThrows(EnvelopeException.class,
                () -> DeadReason.of(DeadReason.CANCELLED, "ops", Instant.parse("+10000-01-01T00:00:00Z"), null));
        assertEquals("dead_reason.at", late.field().orElseThrow());
        assertEquals(4096, DeadReason.of(DeadReason.CANCELLED, "ops", at, "x".repeat(5000)).message().orElseThrow()
                .getBytes(StandardCharsets.UTF_8).length);
    }

    @Test
    @DisplayName("reason codes are [A-Z][A-Z0-9_]* of 1 to 64 bytes, known or not")
    void reason_codes() {
        for (String code : DeadReason.KNOWN_CODES) {
            assertTrue(DeadReason.isValidCode(code), code);
        }
        for (String code : new String[] {"QUOTA_REVOKED", "A", "A1_", "A".repeat(64)}) {
            assertTrue(DeadReason.isValidCode(code), code);
        }
        for (String code : new String[] {"", "_A", "1A", "a", "Cancelled", "A-B", "A B", "\u00c9", "A".repeat(65)}) {
            assertFalse(DeadReason.isValidCode(code), code);
        }
    }
}
