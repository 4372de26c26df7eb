package dev.rdq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.envelope.EnvelopeException;
import dev.rdq.envelope.ErrorCode;
import dev.rdq.envelope.ErrorInfo;
import dev.rdq.json.Json;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonSyntaxException;
import dev.rdq.json.JsonWriter;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.OptionalDouble;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** The flow-control wire: the settle's {@code throttle} and the flow document. */
class FlowWireTest {
    static final String ID = "01J2ZK7Q8XW5H3N9G4T6B8RDQ0";

    static String json(Settle s) {
        JsonWriter w = new JsonWriter(64);
        s.write(w);
        return new String(w.toByteArray(), StandardCharsets.UTF_8);
    }

    @Test
    @DisplayName("a DEFER settle carries \"throttle\" only when it throttles")
    void settle_throttle_json() {
        assertEquals("{\"id\":\"" + ID + "\",\"lease_token\":\"t\",\"outcome\":\"DEFER\",\"defer_ms\":1500,\"throttle\":\"key\"}",
                json(Settle.defer(ID, "t", 1500, ThrottleScope.KEY)));
        assertEquals("{\"id\":\"" + ID + "\",\"lease_token\":\"t\",\"outcome\":\"DEFER\",\"defer_ms\":60000,\"throttle\":\"queue\"}",
                json(Settle.defer(ID, "t", 60_000, ThrottleScope.QUEUE)));
        assertEquals("{\"id\":\"" + ID + "\",\"lease_token\":\"t\",\"outcome\":\"DEFER\",\"defer_ms\":5}",
                json(Settle.defer(ID, "t", 5)));
        assertEquals("{\"id\":\"" + ID + "\",\"lease_token\":\"t\",\"outcome\":\"DEFER\",\"defer_ms\":5}",
                json(Settle.defer(ID, "t", 5, null)));
        assertEquals("{\"id\":\"" + ID + "\",\"lease_token\":\"t\",\"outcome\":\"SUCCESS\"}", json(Settle.success(ID, "t")));
    }

    @Test
    @DisplayName("the five-component constructor still builds a settle that throttles nothing; a throttle needs DEFER")
    void settle_constructors() {
        Settle old = new Settle(ID, "t", SettleOutcome.RETRYABLE_FAILURE, ErrorInfo.of("x.Y", "m"), null);
        assertNull(old.throttle());
        assertEquals(ThrottleScope.KEY, new Settle(ID, "t", SettleOutcome.DEFER, null, 10L, ThrottleScope.KEY).throttle());
        for (SettleOutcome o : SettleOutcome.values()) {
            if (o == SettleOutcome.DEFER) {
                continue;
            }
            EnvelopeException e = assertThrows(EnvelopeException.class,
                    () -> new Settle(ID, "t", o, null, null, ThrottleScope.QUEUE), o.name());
            assertEquals(ErrorCode.INVALID_FIELD, e.errorCode());
            assertEquals("throttle", e.field().orElseThrow());
        }
        assertEquals("key", ThrottleScope.KEY.wireName());
        assertEquals("queue", ThrottleScope.QUEUE.wireName());
    }

    static JsonObject parse(String s) throws JsonSyntaxException {
        return (JsonObject) Json.parse(s);
    }

    @Test
    @DisplayName("a flow document reads into QueueFlow: numbers or null, times or null, keys in order")
    void flow_document() throws Exception {
        QueueFlow f = RdqClient.flowOf(parse("{\"queue\": \"emails\", \"limits\": {\"rate\": {\"per_second\": 10.0, \"burst\": 20},"
                + " \"key_concurrency\": 2}, \"tokens\": 13.5, \"blocked_until\": null, \"in_flight\": 7,"
                + " \"keys\": [{\"key\": \"acme\", \"in_flight\": 2, \"tokens\": null, \"blocked_until\": null},"
                + " {\"key\": \"globex\", \"in_flight\": 0, \"tokens\": 3, \"blocked_until\": \"2026-07-20T14:03:52.117Z\"}],"
                + " \"throttled_claims\": 41}"));
        assertEquals("emails", f.queue());
        assertEquals(2L, f.limits().integer("key_concurrency").orElseThrow());
        assertEquals(OptionalDouble.of(13.5), f.tokens());
        assertTrue(f.blockedUntil().isEmpty());
        assertEquals(7, f.inFlight());
        assertEquals(41, f.throttledClaims());
        assertEquals(2, f.keys().size());
        FlowKeyStatus acme = f.keys().get(0);
        assertEquals(new FlowKeyStatus("acme", 2, OptionalDouble.empty(), java.util.Optional.empty()), acme);
        FlowKeyStatus globex = f.key("globex").orElseThrow();
        assertEquals(OptionalDouble.of(3), globex.tokens());
        assertEquals(Instant.parse("2026-07-20T14:03:52.117Z"), globex.blockedUntil().orElseThrow());
        assertTrue(f.key("initech").isEmpty());

        QueueFlow offset = RdqClient.flowOf(parse("{\"queue\": \"q\", \"limits\": {}, \"tokens\": null,"
                + " \"blocked_until\": \"2026-07-20T16:05:00+02:00\", \"in_flight\": 0, \"keys\": [], \"throttled_claims\": 0}"));
        assertEquals(Instant.parse("2026-07-20T14:05:00Z"), offset.blockedUntil().orElseThrow());
        assertTrue(offset.tokens().isEmpty());
        assertTrue(offset.limits().isEmpty());
    }

    @Test
    @DisplayName("a flow document of the wrong shape is UNEXPECTED_RESPONSE")
    void bad_flow_documents() throws Exception {
        for (String doc : new String[] {
            "{\"limits\": {}, \"keys\": []}",
            "{\"queue\": \"q\", \"limits\": {}}",
            "{\"queue\": \"q\", \"limits\": {}, \"keys\": [], \"tokens\": \"many\"}",
            "{\"queue\": \"q\", \"limits\": {}, \"keys\": [], \"blocked_until\": \"soon\"}",
            "{\"queue\": \"q\", \"limits\": {}, \"keys\": [{\"in_flight\": 1}]}",
            "{\"queue\": \"q\", \"limits\": {}, \"keys\": [1]}",
        }) {
            RdqException e = assertThrows(RdqException.class, () -> RdqClient.flowOf(parse(doc)), doc);
            assertEquals(RdqException.UNEXPECTED_RESPONSE, e.code(), doc);
        }
    }

    @Test
    @DisplayName("throttle refuses a bad queue name or flow key before any request")
    void throttle_local_checks() {
        // Nothing listens here: a request would fail with CONNECTION_FAILED.
        try (RdqClient c = RdqClient.builder("http://127.0.0.1:9").build()) {
            localChecks(c);
        }
    }

    private static void localChecks(RdqClient c) {
        RdqException key = assertThrows(RdqException.class, () -> c.throttle("q", "bad key", java.time.Duration.ofSeconds(1)));
        assertEquals("INVALID_FIELD", key.code());
        assertEquals("flow_key", key.field().orElseThrow());
        assertEquals(0, key.httpStatus());
        assertEquals("INVALID_FIELD", assertThrows(RdqException.class,
                () -> c.throttle("q", "", java.time.Duration.ofSeconds(1))).code());
        assertEquals("INVALID_QUEUE_NAME", assertThrows(RdqException.class,
                () -> c.throttle("Bad Queue", null, java.time.Duration.ofSeconds(1))).code());
        assertEquals("INVALID_QUEUE_NAME", assertThrows(RdqException.class, () -> c.queueFlow("Bad Queue")).code());
    }
}
