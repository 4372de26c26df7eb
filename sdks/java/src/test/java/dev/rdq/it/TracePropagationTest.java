package dev.rdq.it;

import static dev.rdq.it.Support.awaitTask;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.client.TraceContext;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.Status;
import dev.rdq.support.RdqServer;
import dev.rdq.worker.Worker;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * Trace context propagation ({@code docs/sdk-java.md}, "Tracing") against a
 * real {@code rdq serve}: what a submit sends is read back from the stored
 * envelope. One server for the class; every test has queues of its own.
 */
class TracePropagationTest {
    static final String TP1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    static final String TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

    static RdqServer server;
    static RdqClient client;

    @BeforeAll
    static void startServer() {
        server = RdqServer.embedded();
        client = server.client();
    }

    @AfterAll
    static void stopServer() {
        server.close();
    }

    static SubmitRequest task(String queue, String handler) {
        return SubmitRequest.builder(queue, handler).payload("x".getBytes(StandardCharsets.UTF_8)).build();
    }

    /** The traceparent the server stored for the task (read back, not the submit's answer). */
    static Optional<String> stored(Envelope env) {
        return client.get(env.id()).header(TraceContext.HEADER);
    }

    @Test
    @DisplayName("a submit inside a TraceContext scope stores its traceparent; outside one, none")
    void submit_in_scope() {
        Envelope inside;
        TraceContext.Scope scope = TraceContext.open(TP1);
        try {
            inside = client.submit(task("trace.scope", "h"));
        } finally {
            scope.close();
        }
        assertEquals(Optional.of(TP1), stored(inside));
        assertEquals(Optional.of(TP1), inside.header(TraceContext.HEADER));
        assertEquals(Optional.empty(), stored(client.submit(task("trace.scope", "h"))));
        assertEquals(Optional.of(TP2), stored(TraceContext.call(TP2, () -> client.submit(task("trace.scope", "h")))));
    }

    @Test
    @DisplayName("an explicit traceparent header of the submit wins over the current context")
    void explicit_header_wins() {
        SubmitRequest own = SubmitRequest.builder("trace.explicit", "h").header(TraceContext.HEADER, TP2).build();
        Envelope env = TraceContext.call(TP1, () -> client.submit(own));
        assertEquals(Optional.of(TP2), stored(env));
        // The supplier is not even asked when the request has its own.
        RdqClient failing = RdqClient.builder(server.url()).traceParent(() -> {
            throw new AssertionError("the supplier was called");
        }).build();
        assertEquals(Optional.of(TP2), stored(failing.submit(own)));
    }

    @Test
    @DisplayName("the traceParent supplier wins; a malformed answer is never sent, TraceContext.current() is used instead")
    void supplier_values() {
        AtomicReference<String> value = new AtomicReference<>(TP2);
        RdqClient custom = RdqClient.builder(server.url()).traceParent(value::get).build();
        assertEquals(Optional.of(TP2), stored(custom.submit(task("trace.supplier", "h"))));
        assertEquals(Optional.of(TP2), stored(TraceContext.call(TP1, () -> custom.submit(task("trace.supplier", "h")))),
                "the supplier's answer wins over the thread's context");
        value.set(" " + TP2 + "\t");
        assertEquals(Optional.of(TP2), stored(custom.submit(task("trace.supplier", "h"))), "sent without the blanks");
        value.set(null);
        assertEquals(Optional.of(TP1), stored(TraceContext.call(TP1, () -> custom.submit(task("trace.supplier", "h")))),
                "no answer: the thread's context");
        assertEquals(Optional.empty(), stored(custom.submit(task("trace.supplier", "h"))));
        String[] malformed = {
            "",
            "nonsense",
            TP1.toUpperCase(java.util.Locale.ROOT),
            "ff" + TP1.substring(2),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            TP1 + "-00",
            TP1 + "\r\nx-injected: 1",
        };
        for (String m : malformed) {
            value.set(m);
            assertEquals(Optional.empty(), stored(custom.submit(task("trace.supplier", "h"))), "sent " + m);
            assertEquals(Optional.of(TP1), stored(TraceContext.call(TP1, () -> custom.submit(task("trace.supplier", "h")))),
                    "instead of " + m);
        }
        RdqClient throwing = RdqClient.builder(server.url()).traceParent(() -> {
            throw new IllegalStateException("tracer not ready");
        }).build();
        Envelope env = throwing.submit(task("trace.supplier", "h"));
        assertEquals(Status.PENDING, env.status());
        assertEquals(Optional.empty(), stored(env));
        assertEquals(Optional.of(TP1), stored(TraceContext.call(TP1, () -> throwing.submit(task("trace.supplier", "h")))));
    }

    @Test
    @DisplayName("submitAll and submitAsync carry the submitting thread's context (read before the hand-off)")
    void batch_and_async() {
        List<SubmitRequest> batch = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            batch.add(task("trace.batch", "h"));
        }
        batch.add(SubmitRequest.builder("trace.batch", "h").header(TraceContext.HEADER, TP2).build());
        List<Envelope> envs = TraceContext.call(TP1, () -> client.submitAll(batch, 2));
        assertEquals(7, envs.size());
        for (int i = 0; i < 6; i++) {
            assertEquals(Optional.of(TP1), stored(envs.get(i)), "item " + i);
        }
        assertEquals(Optional.of(TP2), stored(envs.get(6)), "the item's own header wins");
        CompletableFuture<Envelope> async = TraceContext.call(TP1, () -> client.submitAsync(task("trace.batch", "h")));
        assertEquals(Optional.empty(), TraceContext.current());
        assertEquals(Optional.of(TP1), stored(async.join()));
        List<Envelope> none = client.submitAll(List.of(task("trace.batch", "h")), 1);
        assertEquals(Optional.empty(), stored(none.get(0)));
    }

    @Test
    @DisplayName("inside a handler current() is the task's traceparent, a follow-up submit carries it, afterwards it is cleared")
    void handler_continues_trace() {
        String q = "trace.worker";
        String followQ = "trace.follow";
        Map<String, Optional<String>> seen = new ConcurrentHashMap<>();
        Map<String, String> threads = new ConcurrentHashMap<>();
        Map<String, String> followUps = new ConcurrentHashMap<>();
        // One platform thread runs every handler, so a context left behind
        // by one task would be seen by the next.
        Worker worker = Worker.builder(client).virtualThreads(false).concurrency(1).pollInterval(Duration.ofMillis(20))
                .handler(q, "traced", t -> {
                    seen.put(t.id(), TraceContext.current());
                    threads.put(t.id(), Thread.currentThread().getName());
                    followUps.put(t.id(), client.submit(task(followQ, "next")).id());
                })
                .handler(q, "plain", t -> {
                    seen.put(t.id(), TraceContext.current());
                    threads.put(t.id(), Thread.currentThread().getName());
                })
                .start();
        try {
            Envelope a = TraceContext.call(TP1, () -> client.submit(task(q, "traced")));
            awaitTask(client, a.id(), "traced task done", e -> e.status() == Status.SUCCEEDED);
            assertEquals(Optional.of(TP1), seen.get(a.id()));
            String followId = followUps.get(a.id());
            assertNotNull(followId);
            assertEquals(Optional.of(TP1), client.get(followId).header(TraceContext.HEADER),
                    "the follow-up submitted from the handler continues the task's trace");

            Envelope b = client.submit(task(q, "plain"));
            awaitTask(client, b.id(), "plain task done", e -> e.status() == Status.SUCCEEDED);
            assertEquals(threads.get(a.id()), threads.get(b.id()), "both tasks ran on the one handler thread");
            assertEquals(Optional.empty(), seen.get(b.id()), "the first task's context was cleared after its handler");

            // A malformed stored traceparent is not made current (nor propagated).
            Envelope c = client.submit(SubmitRequest.builder(q, "traced").header(TraceContext.HEADER, "not-a-traceparent").build());
            awaitTask(client, c.id(), "malformed task done", e -> e.status() == Status.SUCCEEDED);
            assertEquals(Optional.empty(), seen.get(c.id()));
            assertEquals(Optional.empty(), client.get(followUps.get(c.id())).header(TraceContext.HEADER));
        } finally {
            worker.shutdown(Duration.ofSeconds(2));
        }
        assertEquals(Optional.empty(), TraceContext.current());
    }
}
