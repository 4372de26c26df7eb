package dev.rdq.worker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.envelope.CancelRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.internal.ProtoEnvelopes;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import org.junit.jupiter.api.Test;
import rdq.v1.EnvelopeOuterClass;

/** The dead reason and the cancel request of a pushed envelope map as their JSON would. */
class ProtoEnvelopesTest {
    private static final String ID = "01J3Z8Q1W6G5X7V2K9M4N8P0RS";

    private static String json(EnvelopeOuterClass.Envelope m) {
        return new String(ProtoEnvelopes.toJson(m), StandardCharsets.UTF_8);
    }

    @Test
    void aTaskWithoutAReasonLeavesItOutAsTheServerNamesIt() {
        EnvelopeOuterClass.Envelope m = WorkStreamTest.envelope(ID, "send", "{}").addOmitted("dead_reason").build();
        assertTrue(!json(m).contains("dead_reason"), json(m));
        EnvelopeOuterClass.Envelope unnamed = WorkStreamTest.envelope(ID, "send", "{}").build();
        assertTrue(json(unnamed).contains("\"dead_reason\":null"), json(unnamed));
    }

    @Test
    void aDeadReasonKeepsItsMembersAndUnknownOnes() {
        EnvelopeOuterClass.Envelope m = WorkStreamTest.envelope(ID, "send", "{}")
                .setStatus(EnvelopeOuterClass.Status.DEAD).clearLeaseExpiresAt()
                .setDeadReason(EnvelopeOuterClass.DeadReason.newBuilder().setCode("CANCELLED")
                        .setAt("2026-07-20T14:04:00.000Z").setBy("ops").addOmitted("message")
                        .setUnknownJson("{\"zone\":1.50}"))
                .addOmitted("cancel_requested")
                .build();
        Envelope env = ProtoEnvelopes.toEnvelope(m);
        assertEquals("CANCELLED", env.deadReason().orElseThrow().code());
        assertEquals("ops", env.deadReason().orElseThrow().by());
        assertTrue(json(m).endsWith(
                "\"dead_reason\":{\"code\":\"CANCELLED\",\"at\":\"2026-07-20T14:04:00.000Z\",\"by\":\"ops\",\"zone\":1.50}}"),
                json(m));
    }

    @Test
    void aTaskWithoutACancelRequestLeavesItOutAsTheServerNamesIt() {
        EnvelopeOuterClass.Envelope m = WorkStreamTest.envelope(ID, "send", "{}")
                .addOmitted("dead_reason").addOmitted("cancel_requested").build();
        assertFalse(json(m).contains("cancel_requested"), json(m));
        assertTrue(ProtoEnvelopes.toEnvelope(m).cancelRequested().isEmpty());
        EnvelopeOuterClass.Envelope unnamed = WorkStreamTest.envelope(ID, "send", "{}").addOmitted("dead_reason").build();
        assertTrue(json(unnamed).endsWith("\"cancel_requested\":null}"), json(unnamed));
        assertTrue(new String(ProtoEnvelopes.toEnvelope(unnamed).encode(), StandardCharsets.UTF_8)
                .endsWith("\"cancel_requested\":null}"));
    }

    @Test
    void aCancelRequestComesLastAndKeepsItsMembersAndUnknownOnes() {
        EnvelopeOuterClass.Envelope m = WorkStreamTest.envelope(ID, "send", "{}")
                .setStatus(EnvelopeOuterClass.Status.DEAD).clearLeaseExpiresAt()
                .setDeadReason(EnvelopeOuterClass.DeadReason.newBuilder().setCode("CANCELLED")
                        .setAt("2026-07-20T14:04:00.000Z").setBy("ops").setMessage("stop"))
                .setCancelRequested(request().addOmitted("message").setUnknownJson("{\"node\":{\"n\":1.50}}"))
                .setUnknownJson("{\"zz\":true}")
                .build();
        Envelope env = ProtoEnvelopes.toEnvelope(m);
        CancelRequest r = env.cancelRequested().orElseThrow();
        assertEquals("ops", r.by());
        assertEquals(Instant.parse("2026-07-20T14:03:59.000Z"), r.at());
        assertTrue(r.message().isEmpty());
        assertTrue(json(m).endsWith("\"dead_reason\":{\"code\":\"CANCELLED\",\"at\":\"2026-07-20T14:04:00.000Z\","
                + "\"by\":\"ops\",\"message\":\"stop\"},\"cancel_requested\":{\"at\":\"2026-07-20T14:03:59.000Z\","
                + "\"by\":\"ops\",\"node\":{\"n\":1.50}},\"zz\":true}"), json(m));
        // The SDK's codec writes what the JSON said, byte for byte.
        assertArrayEquals(ProtoEnvelopes.toJson(m), env.encode());
    }

    @Test
    void aWorkCancelsRequestMapsThroughItsJson() {
        CancelRequest r = ProtoEnvelopes.toCancelRequest(request().setMessage("customer withdrew").build());
        assertEquals(CancelRequest.of("ops", Instant.parse("2026-07-20T14:03:59.000Z"), "customer withdrew"), r);
        assertEquals("cancelled by ops: customer withdrew", r.toString());
        // Unset message without omitted: null, as in an envelope.
        assertTrue(ProtoEnvelopes.toCancelRequest(request().build()).message().isEmpty());
    }

    @Test
    void anInvalidCancelRequestIsUnexpectedResponseWithItsPath() {
        String[][] cases = {
            {"", "ops", "cancel_requested.at"},
            {"2026-07-20T14:03:59Z", "ops", "cancel_requested.at"},
            {"2026-07-20T14:03:59.000Z", "", "cancel_requested.by"},
        };
        for (String[] c : cases) {
            RdqException e = assertThrows(RdqException.class, () -> ProtoEnvelopes.toCancelRequest(
                    EnvelopeOuterClass.CancelRequest.newBuilder().setAt(c[0]).setBy(c[1]).build()));
            assertEquals(RdqException.UNEXPECTED_RESPONSE, e.code());
            assertEquals(c[2], e.field().orElseThrow(), e.getMessage());
        }
        RdqException dup = assertThrows(RdqException.class, () -> ProtoEnvelopes.toCancelRequest(
                request().setUnknownJson("{\"by\":\"x\"}").build()));
        assertEquals(RdqException.UNEXPECTED_RESPONSE, dup.code());
        RdqException notJson = assertThrows(RdqException.class, () -> ProtoEnvelopes.toCancelRequest(
                request().setUnknownJson("{").build()));
        assertEquals(RdqException.UNEXPECTED_RESPONSE, notJson.code());
        EnvelopeOuterClass.Envelope bad = WorkStreamTest.envelope(ID, "send", "{}")
                .setCancelRequested(EnvelopeOuterClass.CancelRequest.newBuilder().setAt("x").setBy("ops")).build();
        assertEquals("cancel_requested.at", assertThrows(RdqException.class, () -> ProtoEnvelopes.toEnvelope(bad))
                .field().orElseThrow());
    }

    static EnvelopeOuterClass.CancelRequest.Builder request() {
        return EnvelopeOuterClass.CancelRequest.newBuilder().setAt("2026-07-20T14:03:59.000Z").setBy("ops");
    }
}
