package dev.rdq.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.envelope.Envelope;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import rdq.v1.EnvelopeOuterClass;

/** The dead reason of a pushed envelope maps as its JSON would. */
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
                .build();
        Envelope env = ProtoEnvelopes.toEnvelope(m);
        assertEquals("CANCELLED", env.deadReason().orElseThrow().code());
        assertEquals("ops", env.deadReason().orElseThrow().by());
        assertTrue(json(m).endsWith(
                "\"dead_reason\":{\"code\":\"CANCELLED\",\"at\":\"2026-07-20T14:04:00.000Z\",\"by\":\"ops\",\"zone\":1.50}}"),
                json(m));
    }
}
