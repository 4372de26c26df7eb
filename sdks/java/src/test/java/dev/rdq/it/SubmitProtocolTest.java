package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitProtocol;
import dev.rdq.client.SubmitRequest;
import dev.rdq.client.SubmitResult;
import dev.rdq.client.TraceContext;
import dev.rdq.envelope.Envelope;
import dev.rdq.support.RdqServer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.Parameter;
import org.junit.jupiter.params.ParameterizedClass;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The submit calls over each {@link SubmitProtocol} against one embedded-store
 * server: every option lands in the stored envelope the same way, the trace
 * context rides along, batches answer per item, refusals keep their codes.
 */
@DisplayName("submits on the embedded store")
@ParameterizedClass(name = "over {0}")
@EnumSource(SubmitProtocol.class)
class SubmitProtocolTest {
    static final String TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    private static final AtomicInteger QUEUES = new AtomicInteger();
    static RdqServer server;

    @Parameter
    SubmitProtocol protocol;

    RdqClient client;
    String queue;

    @BeforeAll
    static void startServer() {
        server = RdqServer.embedded();
    }

    @AfterAll
    static void stopServer() {
        server.close();
    }

    @BeforeEach
    void connect() {
        client = RdqClient.builder(server.url()).submitProtocol(protocol).build();
        queue = "java.submit." + protocol.name().toLowerCase(java.util.Locale.ROOT) + "." + QUEUES.incrementAndGet();
    }

    @AfterEach
    void disconnect() {
        client.close();
    }

    @Test
    @DisplayName("every option of the request is stored, and a repeated idempotency key answers the first task")
    void options() {
        Instant before = Instant.now();
        SubmitRequest r = SubmitRequest.builder(queue, "send").payload(new byte[] {1, 2, 3}, "application/x-test")
                .header("tenant", "acme").correlationId("c-1").priority(7).delay(Duration.ofMinutes(10))
                .idempotencyKey("idem-1").handlerVersion("v2").flowKey("acme").build();
        Envelope env = client.submit(r);
        assertArrayEquals(new byte[] {1, 2, 3}, env.payload());
        assertEquals("application/x-test", env.payloadContentType());
        assertEquals("acme", env.headers().get("tenant"));
        assertEquals("c-1", env.headers().get(SubmitRequest.CORRELATION_ID_HEADER));
        assertEquals("acme", env.headers().get("rdq.flow_key"));
        assertEquals(7, env.priority());
        assertEquals(Optional.of("v2"), env.handlerVersion());
        assertTrue(env.nextAttemptAt().orElseThrow().isAfter(before.plus(Duration.ofMinutes(9))));
        assertEquals(env.id(), client.submit(r).id(), "an idempotent repeat");

        Envelope json = client.submit(SubmitRequest.builder(queue, "send").payloadJson("{\"a\": [1, 2.50]}").build());
        assertEquals("{\"a\": [1, 2.50]}", new String(json.payload(), StandardCharsets.UTF_8));
        assertEquals("application/json", json.payloadContentType());
    }

    @Test
    @DisplayName("the trace context is sent with single submits and batches; a request's own traceparent wins")
    void trace_context() {
        Envelope env = TraceContext.call(TP, () -> client.submit(SubmitRequest.builder(queue, "h").build()));
        assertEquals(TP, env.headers().get(TraceContext.HEADER));
        String own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        List<SubmitResult> batch = TraceContext.call(TP, () -> client.submitBatch(List.of(
                SubmitRequest.builder(queue, "h").build(),
                SubmitRequest.builder(queue, "h").header(TraceContext.HEADER, own).build())));
        assertEquals(TP, batch.get(0).orThrow().headers().get(TraceContext.HEADER));
        assertEquals(own, batch.get(1).orThrow().headers().get(TraceContext.HEADER));
        assertFalse(client.submit(SubmitRequest.builder(queue, "h").build()).headers().containsKey(TraceContext.HEADER));
    }

    @Test
    @DisplayName("a batch answers per item: created, an idempotent repeat, a refusal with its code")
    void batch() {
        List<SubmitResult> results = client.submitBatch(List.of(
                SubmitRequest.builder(queue, "h").idempotencyKey("k").build(),
                SubmitRequest.builder(queue, "h").idempotencyKey("k").build(),
                SubmitRequest.builder(queue, "h").idempotencyKey("").build(),
                SubmitRequest.builder(queue, "h").build()));
        assertTrue(results.get(0).created());
        assertTrue(results.get(1).ok());
        assertFalse(results.get(1).created());
        assertEquals(200, results.get(1).status());
        assertEquals(results.get(0).orThrow().id(), results.get(1).orThrow().id());
        SubmitResult refused = results.get(2);
        assertFalse(refused.ok());
        assertEquals(400, refused.status());
        assertEquals("INVALID_FIELD", refused.error().orElseThrow().code());
        assertThrows(RdqException.class, refused::orThrow);
        assertTrue(results.get(3).created(), "the items after a refused one are stored");
        assertTrue(client.submitBatch(List.of()).isEmpty());
    }

    @Test
    @DisplayName("a refusal of a single submit keeps its code, field and status; an unreachable server is CONNECTION_FAILED")
    void refusals() {
        RdqException e = assertThrows(RdqException.class,
                () -> client.submit(SubmitRequest.builder(queue, "h").idempotencyKey("").build()));
        assertEquals("INVALID_FIELD", e.code(), e.getMessage());
        assertEquals("idempotency_key", e.field().orElseThrow());
        assertEquals(400, e.httpStatus());

        try (RdqClient nowhere = RdqClient.builder("http://127.0.0.1:1").submitProtocol(protocol)
                .connectTimeout(Duration.ofSeconds(2)).build()) {
            RdqException down = assertThrows(RdqException.class,
                    () -> nowhere.submit(SubmitRequest.builder(queue, "h").build()));
            assertEquals(RdqException.CONNECTION_FAILED, down.code(), down.getMessage());
        }
    }
}
