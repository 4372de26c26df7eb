package dev.rdq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.UniqueHeldException;
import dev.rdq.internal.GrpcChannels;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import rdq.v1.Api;

/**
 * The uniqueness wire: the submit body's {@code unique}, gRPC's {@code
 * UniqueOptions}, the checks made before sending, and refusals read back
 * from a {@code rdq.v1.Problem}.
 */
class UniqueWireTest {
    static String body(SubmitRequest r) {
        return new String(r.toJson(), StandardCharsets.UTF_8);
    }

    static SubmitRequest.Builder request() {
        return SubmitRequest.builder("billing", "charge").payloadJson("{\"customer_id\":42,\"month\":\"2026-12\"}");
    }

    @Test
    @DisplayName("a unique submit carries \"unique\" with only the options set, in the server's member names")
    void unique_json() {
        assertEquals("{\"queue\":\"billing\",\"handler_ref\":\"charge\",\"payload_json\":{\"customer_id\":42,\"month\":\"2026-12\"},"
                + "\"unique\":{\"key\":\"invoice-42\"}}", body(request().uniqueKey("invoice-42").build()));
        assertEquals("{\"queue\":\"billing\",\"handler_ref\":\"charge\",\"payload_json\":{\"customer_id\":42,\"month\":\"2026-12\"},"
                + "\"unique\":{\"key_from\":[\"/customer_id\",\"/month\"],\"scope\":\"handler\",\"hold\":\"for\","
                + "\"hold_ms\":90000,\"on_conflict\":\"debounce\"}}",
                body(request().uniqueKeyFrom("/customer_id", "/month").uniqueScope(UniqueScope.HANDLER)
                        .uniqueHoldFor(Duration.ofSeconds(90)).uniqueOnConflict(UniqueConflict.DEBOUNCE).build()));
        assertTrue(body(request().uniqueKey("k").uniqueHold(UniqueHold.UNTIL_SUCCEEDED)
                .uniqueOnConflict(UniqueConflict.REPLACE).build())
                .endsWith("\"unique\":{\"key\":\"k\",\"hold\":\"until_succeeded\",\"on_conflict\":\"replace\"}}"));
        assertFalse(body(request().build()).contains("unique"));
        assertTrue(request().build().unique().isEmpty());
    }

    @Test
    @DisplayName("every hold, scope and conflict mode has the server's name")
    void wire_names() {
        assertEquals(List.of("until_started", "until_finished", "until_succeeded", "for", "forever"),
                java.util.Arrays.stream(UniqueHold.values()).map(UniqueHold::wireName).toList());
        assertEquals(List.of("queue", "handler"),
                java.util.Arrays.stream(UniqueScope.values()).map(UniqueScope::wireName).toList());
        assertEquals(List.of("return", "replace", "debounce", "existing"),
                java.util.Arrays.stream(UniqueConflict.values()).map(UniqueConflict::wireName).toList());
    }

    @Test
    @DisplayName("the options read back, and a hold other than for drops the duration")
    void read_back() {
        Unique u = request().uniqueKeyFrom(List.of("/customer_id")).uniqueHoldFor(Duration.ofMinutes(1))
                .uniqueScope(UniqueScope.QUEUE).build().unique().orElseThrow();
        assertTrue(u.key().isEmpty());
        assertEquals(List.of("/customer_id"), u.keyFrom());
        assertEquals(UniqueHold.FOR, u.hold().orElseThrow());
        assertEquals(Duration.ofMinutes(1), u.holdFor().orElseThrow());
        assertEquals(UniqueScope.QUEUE, u.scope().orElseThrow());
        assertTrue(u.onConflict().isEmpty());
        Unique later = request().uniqueKey("k").uniqueHoldFor(Duration.ofMinutes(1)).uniqueHold(UniqueHold.FOREVER)
                .build().unique().orElseThrow();
        assertTrue(later.holdFor().isEmpty());
        assertEquals("{\"key\":\"k\",\"hold\":\"forever\"}", later.toString());
    }

    @Test
    @DisplayName("gRPC's UniqueOptions carries the same options; an unset one stays unset")
    void unique_proto() {
        Api.SubmitRequest m = request().uniqueKeyFrom("/customer_id", "/month").uniqueHoldFor(Duration.ofSeconds(90))
                .uniqueOnConflict(UniqueConflict.REPLACE).flowKey("acme").build().toProto();
        Api.UniqueOptions u = m.getUnique();
        assertFalse(u.hasKey());
        assertEquals(List.of("/customer_id", "/month"), u.getKeyFromList());
        assertFalse(u.hasScope());
        assertEquals("for", u.getHold());
        assertEquals(90_000, u.getHoldMs());
        assertEquals("replace", u.getOnConflict());
        assertEquals("application/json", m.getPayloadContentType());
        assertEquals("{\"customer_id\":42,\"month\":\"2026-12\"}", m.getPayload().toStringUtf8());
        assertEquals("acme", m.getFlowKey());
        assertFalse(request().build().toProto().hasUnique());
        Api.UniqueOptions key = request().uniqueKey("k").build().toProto().getUnique();
        assertEquals("k", key.getKey());
        assertEquals(0, key.getKeyFromCount());
        assertFalse(key.hasHold() || key.hasHoldMs() || key.hasOnConflict());
    }

    @Test
    @DisplayName("a key and key pointers, neither, or a hold for without a duration are refused before sending")
    void refused_locally() {
        RdqException both = assertThrows(RdqException.class,
                () -> request().uniqueKey("k").uniqueKeyFrom("/customer_id").build());
        assertEquals("INVALID_ARGUMENT", both.code());
        assertEquals("unique.key", both.field().orElseThrow());
        assertEquals(0, both.httpStatus());
        for (SubmitRequest.Builder neither : List.of(request().uniqueHold(UniqueHold.FOREVER),
                request().uniqueKeyFrom(), request().uniqueOnConflict(UniqueConflict.REPLACE))) {
            RdqException e = assertThrows(RdqException.class, neither::build);
            assertEquals("INVALID_ARGUMENT", e.code());
            assertEquals("unique.key", e.field().orElseThrow());
        }
        RdqException forever = assertThrows(RdqException.class,
                () -> request().uniqueKey("k").uniqueHold(UniqueHold.FOR).build());
        assertEquals("INVALID_ARGUMENT", forever.code());
        assertEquals("unique.hold_ms", forever.field().orElseThrow());
        RdqException negative = assertThrows(RdqException.class,
                () -> request().uniqueHoldFor(Duration.ofMillis(-1)));
        assertEquals("INVALID_ARGUMENT", negative.code());
        assertEquals("unique.hold_ms", negative.field().orElseThrow());
        // What is not certain without the server is left to it: a long key, a pointer without '/'.
        request().uniqueKey("k".repeat(600)).build();
        request().uniqueKeyFrom("customer_id").build();
    }

    @Test
    @DisplayName("a gRPC refusal's Problem becomes the exception: UNIQUE_HELD with holder and hold, others with field")
    void problem_of_status() {
        StatusRuntimeException held = status(Status.Code.ABORTED, Api.Problem.newBuilder().setCode("UNIQUE_HELD")
                .setDetail("the unique key is held by task 01J2ZK7Q8XW5H3N9G4T6B8RDQ0 (hold for:60000); nothing was written")
                .setHttpStatus(409)
                .setExtensionsJson("{\"hold\":\"for:60000\",\"holder\":\"01J2ZK7Q8XW5H3N9G4T6B8RDQ0\"}").build());
        UniqueHeldException u = assertThrows(UniqueHeldException.class, () -> {
            throw GrpcChannels.error(held);
        });
        assertEquals("UNIQUE_HELD", u.code());
        assertEquals("01J2ZK7Q8XW5H3N9G4T6B8RDQ0", u.holder());
        assertEquals("for:60000", u.hold().orElseThrow());
        assertEquals(409, u.httpStatus());
        assertTrue(u.getMessage().startsWith("UNIQUE_HELD: the unique key is held by task"), u.getMessage());

        RdqException bad = GrpcChannels.error(status(Status.Code.INVALID_ARGUMENT, Api.Problem.newBuilder()
                .setCode("INVALID_ARGUMENT").setDetail("unique.key_from: the payload has nothing at \"/x\"")
                .setHttpStatus(400).setExtensionsJson("{\"field\":\"unique.key_from\"}").build()));
        assertFalse(bad instanceof UniqueHeldException);
        assertEquals("INVALID_ARGUMENT", bad.code());
        assertEquals("unique.key_from", bad.field().orElseThrow());
        assertEquals(400, bad.httpStatus());

        // UNIQUE_HELD without a holder (not rdq's answer) stays a plain RdqException with its code.
        RdqException bare = GrpcChannels.problem(Api.Problem.newBuilder().setCode("UNIQUE_HELD").setDetail("?")
                .setHttpStatus(409).build(), null);
        assertFalse(bare instanceof UniqueHeldException);
        assertEquals("UNIQUE_HELD", bare.code());
    }

    static StatusRuntimeException status(Status.Code code, Api.Problem problem) {
        return StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder().setCode(code.value())
                .setMessage(problem.getCode() + ": " + problem.getDetail())
                .addDetails(com.google.protobuf.Any.pack(problem)).build());
    }
}
