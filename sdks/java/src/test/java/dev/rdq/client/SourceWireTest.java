package dev.rdq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** The sources' wire: the requests the calls send and the reading of the server's answers. */
class SourceWireTest {
    /** The example of docs/sources.md ("Status"), with members this SDK does not know, at every level. */
    static final String DOCUMENTED = "{\"name\":\"orders\",\"kind\":\"kafka\",\"queue\":\"orders\",\"state\":\"retrying\","
            + "\"paused\":false,\"lag\":12,\"ingested\":48210,\"dead\":1,\"duplicates\":3,\"rate\":812.4,"
            + "\"last_error\":\"source orders: the topic orders does not exist on kafka-1:9092\","
            + "\"last_error_at_ms\":1767225600123,\"cursors_in_store\":true,"
            + "\"partitions\":[{\"partition\":\"0\",\"cursor\":16070,\"lag\":4,\"leader\":3},"
            + "{\"partition\":\"1\",\"cursor\":null,\"lag\":null}],\"future_field\":{\"a\":[1,2]}}";

    /** A source nothing is measured of yet. */
    static final String FRESH = "{\"name\":\"inv.sqs\",\"kind\":\"sqs\",\"queue\":\"invoices\",\"state\":\"starting\","
            + "\"paused\":false,\"lag\":null,\"ingested\":0,\"dead\":0,\"duplicates\":0,\"rate\":0.0,\"last_error\":null,"
            + "\"last_error_at_ms\":null,\"cursors_in_store\":false,\"partitions\":[]}";

    static final SourceStatus DOCUMENTED_STATUS = new SourceStatus("orders", SourceStatus.Kind.KAFKA, "orders",
            SourceStatus.State.RETRYING, false, OptionalLong.of(12), 48210, 1, 3, 812.4,
            Optional.of("source orders: the topic orders does not exist on kafka-1:9092"),
            Optional.of(Instant.ofEpochMilli(1767225600123L)), true,
            List.of(new SourcePartition("0", OptionalLong.of(16070), OptionalLong.of(4)),
                    new SourcePartition("1", OptionalLong.empty(), OptionalLong.empty())));

    static final SourceStatus FRESH_STATUS = new SourceStatus("inv.sqs", SourceStatus.Kind.SQS, "invoices",
            SourceStatus.State.STARTING, false, OptionalLong.empty(), 0, 0, 0, 0.0, Optional.empty(), Optional.empty(),
            false, List.of());

    static final String NOT_FOUND = "{\"code\":\"SOURCE_NOT_FOUND\",\"detail\":\"no source \\\"nope\\\" runs in this server\","
            + "\"status\":404,\"title\":\"Source not found\",\"type\":\"urn:rdq:error:SOURCE_NOT_FOUND\"}";

    /** Answers by "METHOD path"; anything else is 404 SOURCE_NOT_FOUND. Remembers the requests. */
    static class Routes implements Transport {
        final Map<String, String> answers;
        final List<Request> requests = new ArrayList<>();

        Routes(Map<String, String> answers) {
            this.answers = answers;
        }

        @Override
        public synchronized Response send(Request r) {
            requests.add(r);
            String answer = answers.get(r.method() + " " + r.uri().getRawPath());
            return answer == null ? new Response(404, NOT_FOUND.getBytes(StandardCharsets.UTF_8))
                    : new Response(200, answer.getBytes(StandardCharsets.UTF_8));
        }

        @Override
        public StreamedResponse open(Request r) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void close() {}

        synchronized List<String> seen() {
            return requests.stream().map(r -> r.method() + " " + r.uri().getRawPath()).toList();
        }
    }

    static RdqClient client(Transport t) {
        return RdqClient.builder("http://rdq.invalid").transport(t).build();
    }

    @Test
    @DisplayName("list, get and reset read the server's answers, ignoring members they do not know")
    void calls_read_answers() {
        Routes t = new Routes(Map.of(
                "GET /v1/sources", "{\"sources\":[" + FRESH + "," + DOCUMENTED + "],\"next\":\"ignored\"}",
                "GET /v1/sources/orders", DOCUMENTED,
                "DELETE /v1/sources/orders/cursors", "{\"name\":\"orders\",\"deleted\":6,\"by\":\"ignored\"}"));
        RdqClient c = client(t);

        assertEquals(List.of(FRESH_STATUS, DOCUMENTED_STATUS), c.listSources());
        SourceStatus s = c.getSource("orders");
        assertEquals(DOCUMENTED_STATUS, s);
        assertEquals(OptionalLong.of(16070), s.partition("0").orElseThrow().cursor());
        assertEquals(Optional.empty(), s.partition("2"));
        assertEquals(6, c.resetSourceCursors("orders"));

        RdqException e = assertThrows(RdqException.class, () -> c.getSource("nope"));
        assertEquals("SOURCE_NOT_FOUND", e.code());
        assertEquals(404, e.httpStatus());
        assertEquals("no source \"nope\" runs in this server", e.detail());
        assertEquals("SOURCE_NOT_FOUND", assertThrows(RdqException.class, () -> c.resetSourceCursors("nope")).code());

        assertEquals(List.of("GET /v1/sources", "GET /v1/sources/orders", "DELETE /v1/sources/orders/cursors",
                "GET /v1/sources/nope", "DELETE /v1/sources/nope/cursors"), t.seen());
        for (Transport.Request r : t.requests) {
            assertNull(r.body(), "no body: " + r.uri());
            assertEquals("application/json", r.headers().get("accept"));
        }
    }

    @Test
    @DisplayName("a reset refused by the store is the server's UNSUPPORTED")
    void unsupported_reset() {
        Transport t = new Routes(Map.of()) {
            @Override
            public synchronized Response send(Request r) {
                return new Response(501, ("{\"code\":\"UNSUPPORTED\",\"title\":\"Unsupported\","
                        + "\"detail\":\"the store keeps no source cursors\",\"status\":501}").getBytes(StandardCharsets.UTF_8));
            }
        };
        RdqException e = assertThrows(RdqException.class, () -> client(t).resetSourceCursors("orders"));
        assertEquals("UNSUPPORTED", e.code());
        assertEquals(501, e.httpStatus());
    }

    @Test
    @DisplayName("an answer this SDK cannot read is UNEXPECTED_RESPONSE")
    void unreadable_answers() {
        for (String bad : List.of(FRESH.replace("\"sqs\"", "\"pubsub\""), FRESH.replace("\"starting\"", "\"dozing\""),
                FRESH.replace("\"lag\":null", "\"lag\":\"many\""), FRESH.replace("\"name\":\"inv.sqs\",", ""),
                FRESH.replace("\"partitions\":[]", "\"partitions\":[1]"))) {
            Routes t = new Routes(Map.of("GET /v1/sources/inv.sqs", bad));
            assertEquals(RdqException.UNEXPECTED_RESPONSE,
                    assertThrows(RdqException.class, () -> client(t).getSource("inv.sqs"), bad).code());
        }
        Routes t = new Routes(Map.of("DELETE /v1/sources/inv.sqs/cursors", "{\"name\":\"inv.sqs\"}"));
        assertEquals(RdqException.UNEXPECTED_RESPONSE,
                assertThrows(RdqException.class, () -> client(t).resetSourceCursors("inv.sqs")).code());
    }

    @Test
    @DisplayName("a bad source name is refused before any request, as the server would: INVALID_ARGUMENT on source")
    void bad_names_refused_locally() {
        Routes t = new Routes(Map.of());
        RdqClient c = client(t);
        for (String name : List.of("", ".", "..", "Orders", "a/b", "a b", "é", "a".repeat(121))) {
            RdqException get = assertThrows(RdqException.class, () -> c.getSource(name), name);
            assertEquals("INVALID_ARGUMENT", get.code());
            assertEquals(Optional.of("source"), get.field());
            assertEquals(0, get.httpStatus());
            assertEquals("INVALID_ARGUMENT", assertThrows(RdqException.class, () -> c.resetSourceCursors(name)).code());
        }
        assertThrows(NullPointerException.class, () -> c.getSource(null));
        assertTrue(t.requests.isEmpty());
        // Names the server takes are sent.
        for (String name : List.of(".x", "..x", "a.b_c-1", "a".repeat(120))) {
            assertEquals("SOURCE_NOT_FOUND", assertThrows(RdqException.class, () -> c.getSource(name)).code());
        }
        assertEquals(4, t.requests.size());
    }

    @Test
    @DisplayName("the kinds and states read and write their JSON names")
    void enums() {
        for (SourceStatus.Kind k : SourceStatus.Kind.values()) {
            assertEquals(Optional.of(k), SourceStatus.Kind.fromWire(k.wire()));
        }
        assertEquals(List.of("kafka", "nats", "sqs"),
                List.of(SourceStatus.Kind.values()).stream().map(SourceStatus.Kind::wire).toList());
        assertEquals(List.of("starting", "running", "paused", "retrying", "stopped"),
                List.of(SourceStatus.State.values()).stream().map(SourceStatus.State::wire).toList());
        assertFalse(SourceStatus.State.fromWire("RUNNING").isPresent());
    }
}
