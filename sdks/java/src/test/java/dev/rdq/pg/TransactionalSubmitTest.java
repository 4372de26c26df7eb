package dev.rdq.pg;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.ClaimedTask;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.EnvelopeCodec;
import dev.rdq.envelope.Ulid;
import dev.rdq.json.JsonObject;
import dev.rdq.support.RdqServer;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * {@link TransactionalSubmit} against a real PostgreSQL: each test on a
 * schema of its own, made by {@code rdq serve} and dropped afterwards.
 */
@DisplayName("submitting inside a PostgreSQL transaction")
class TransactionalSubmitTest {
    /** The database of {@link RdqServer#POSTGRES}, for JDBC. */
    static final String JDBC = "jdbc:postgresql://127.0.0.1:5432/test?user=postgres";

    static Connection open() throws SQLException {
        return DriverManager.getConnection(JDBC);
    }

    static SubmitRequest.Builder order(String queue) {
        return SubmitRequest.builder(queue, "emails.send").payloadJson("{\"to\":\"a@example.com\"}");
    }

    static int rows(Connection c, String schema) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT count(*) FROM " + schema + ".tasks")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    /** Task {@code id}'s stored envelope, or null. */
    static byte[] stored(Connection c, String schema, String id) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT t.envelope FROM " + schema + ".tasks t WHERE " + schema + ".task_id_text(t.id) = ?")) {
            ps.setString(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() ? rs.getBytes(1) : null;
            }
        }
    }

    /** The work wake-ups {@code listener} receives within {@code ms}. */
    static List<String> wakeUps(Connection listener, int ms) throws SQLException {
        List<String> notes = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (notes.isEmpty()) {
            int left = (int) TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            if (left <= 0) {
                break;
            }
            PGNotification[] got = listener.unwrap(PGConnection.class).getNotifications(left);
            for (PGNotification n : got == null ? new PGNotification[0] : got) {
                if (n.getParameter().startsWith("w ")) {
                    notes.add(n.getParameter());
                }
            }
        }
        return notes;
    }

    @Test
    @DisplayName("a rolled-back submit never exists; a committed one wakes workers at the commit and is claimed")
    void rollbackLeavesNothingAndCommitWakesWorkers() throws Exception {
        try (RdqServer server = RdqServer.start(RdqServer.Store.POSTGRES, null);
                RdqClient client = server.client();
                Connection listener = open();
                Connection db = open();
                Connection other = open()) {
            String schema = server.schema();
            try (Statement s = listener.createStatement()) {
                s.execute("LISTEN rdq_" + schema);
            }
            db.setAutoCommit(false);

            String id = TransactionalSubmit.submit(db, schema, order("orders").build());
            assertTrue(Ulid.isValid(id), id);
            assertNull(stored(other, schema, id), "seen before the commit");
            db.rollback();
            assertEquals(0, rows(other, schema), "a rolled-back task exists");
            assertEquals(List.of(), wakeUps(listener, 300), "a rolled-back submit woke workers");

            try (Statement s = db.createStatement()) {
                s.execute("SELECT 1");
            }
            id = TransactionalSubmit.submit(db, schema, order("orders").build());
            db.commit();
            assertEquals(List.of("w sql orders"), wakeUps(listener, 2000), "no wake-up within 2 s of the commit");
            byte[] bytes = stored(other, schema, id);
            assertArrayEquals(bytes, EnvelopeCodec.decode(bytes).encode(), "not canonical");

            List<ClaimedTask> claimed = client.claim("orders", 10, null);
            assertEquals(1, claimed.size());
            assertEquals(id, claimed.get(0).id());
        }
    }

    @Test
    @DisplayName("the stored envelope is the one rdq serve writes for the same task, byte for byte")
    void envelopeIsTheNodes() throws Exception {
        byte[] allBytes = new byte[256];
        for (int i = 0; i < allBytes.length; i++) {
            allBytes[i] = (byte) i;
        }
        List<Supplier<SubmitRequest.Builder>> tasks = List.of(
                () -> order("plain"),
                () -> SubmitRequest.builder("bytes", "blob.store").payload(allBytes),
                () -> SubmitRequest.builder("headed", "emails.send").payloadJson("{}")
                        .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
                        .header("Z-upper", "sorted before lower-case")
                        .header("a\"quote\\slash", "line\nbreak\ttab\u0001\u007f é ✓ 𝄞 / <&>")
                        .header("", "")
                        .handlerVersion("2026.12 \"beta\"")
                        .priority(255)
                        .delay(Duration.ofSeconds(90)),
                () -> SubmitRequest.builder("keyed", "flows.run").payload(new byte[] {'x'})
                        .flowKey("tenant:42/eu@x=y+z").idempotencyKey("order-1").correlationId("req-7"),
                () -> SubmitRequest.builder("empty", "noop"));
        try (RdqServer server = RdqServer.start(RdqServer.Store.POSTGRES, null);
                RdqClient client = server.client();
                Connection db = open()) {
            String schema = server.schema();
            for (Supplier<SubmitRequest.Builder> task : tasks) {
                SubmitRequest request = task.get().build();
                String id = TransactionalSubmit.submit(db, schema, request); // autocommit: a transaction of its own
                byte[] bytes = stored(db, schema, id);
                Envelope env = EnvelopeCodec.decode(bytes);
                assertArrayEquals(bytes, env.encode(), "not canonical");
                assertEquals(request.delayMs(),
                        Duration.between(env.createdAt(), env.nextAttemptAt().orElseThrow()).toMillis());

                // The same task through rdq serve, in a queue of its own (the
                // idempotency key is the queue's), with this one's id and instants.
                SubmitRequest.Builder twin = task.get();
                Envelope node = client.submit(rebuild(twin, request.queue() + "-http"));
                String want = new String(node.encode(), StandardCharsets.UTF_8)
                        .replace("\"id\":\"" + node.id() + "\"", "\"id\":\"" + id + "\"")
                        .replace("\"queue\":\"" + request.queue() + "-http\"", "\"queue\":\"" + request.queue() + "\"");
                String got = new String(bytes, StandardCharsets.UTF_8);
                for (String instant : List.of("created_at", "next_attempt_at")) {
                    want = want.replaceFirst("\"" + instant + "\":\"[^\"]*\"",
                            Matcher.quoteReplacement(member(got, instant)));
                }
                assertEquals(want, got, "rdq serve and SCHEMA.submit disagree");
                if (request.idempotencyKey().isPresent()) {
                    assertEquals(id, client.submit(request).id(), "rdq serve answered another task for the key");
                }
            }
        }
    }

    /** {@code b}'s request, in {@code queue}. */
    static SubmitRequest rebuild(SubmitRequest.Builder b, String queue) {
        SubmitRequest r = b.build();
        SubmitRequest.Builder copy = SubmitRequest.builder(queue, r.handlerRef())
                .payload(r.payload(), r.payloadContentType())
                .headers(r.headers())
                .priority(r.priority())
                .delay(Duration.ofMillis(r.delayMs()));
        r.handlerVersion().ifPresent(copy::handlerVersion);
        r.idempotencyKey().ifPresent(copy::idempotencyKey);
        r.flowKey().ifPresent(copy::flowKey);
        return copy.build();
    }

    static String member(String json, String name) {
        Matcher m = Pattern.compile("\"" + name + "\":\"[^\"]*\"").matcher(json);
        assertTrue(m.find(), name);
        return m.group();
    }

    @Test
    @DisplayName("two transactions submitting one idempotency key make one task, whichever way the first ends")
    void oneTaskPerIdempotencyKey() throws Exception {
        try (RdqServer server = RdqServer.start(RdqServer.Store.POSTGRES, null); Connection check = open()) {
            String schema = server.schema();
            SubmitRequest request = order("orders").idempotencyKey("order-7").build();
            for (boolean firstCommits : new boolean[] {true, false}) {
                try (Connection a = open(); Connection b = open()) {
                    a.setAutoCommit(false);
                    b.setAutoCommit(false);
                    String first = TransactionalSubmit.submit(a, schema, request);
                    CompletableFuture<String> second = CompletableFuture.supplyAsync(() -> {
                        try {
                            String id = TransactionalSubmit.submit(b, schema, request);
                            b.commit();
                            return id;
                        } catch (SQLException e) {
                            throw new IllegalStateException(e);
                        }
                    });
                    assertThrows(TimeoutException.class, () -> second.get(300, TimeUnit.MILLISECONDS),
                            "the second submit did not wait for the first");
                    if (firstCommits) {
                        a.commit();
                        assertEquals(first, second.get(10, TimeUnit.SECONDS), "two tasks for one key");
                    } else {
                        a.rollback();
                        assertNotEquals(first, second.get(10, TimeUnit.SECONDS),
                                "the key went to a task that was rolled back");
                    }
                }
                assertEquals(1, rows(check, schema));
                try (Statement s = check.createStatement()) {
                    s.execute("DELETE FROM " + schema + ".tasks");
                }
            }
        }
    }

    /** One bad input: the code and field it is refused with, and whether rdq refuses it before sending. */
    record Bad(String code, String field, Supplier<SubmitRequest> request, boolean local) {}

    static Bad sql(String code, String field, Supplier<SubmitRequest> request) {
        return new Bad(code, field, request, false);
    }

    static Bad local(String code, String field, Supplier<SubmitRequest> request) {
        return new Bad(code, field, request, true);
    }

    @Test
    @DisplayName("bad input is refused with rdq's codes and fields, and writes nothing")
    void badInputIsRefused() throws Exception {
        List<Bad> bad = List.of(
                // Refused by SubmitRequest.build(), as for a submit through rdq serve.
                local("INVALID_QUEUE_NAME", "queue", () -> order("Orders").build()),
                local("INVALID_QUEUE_NAME", "queue", () -> order("").build()),
                local("INVALID_QUEUE_NAME", "queue", () -> order("..").build()),
                local("INVALID_QUEUE_NAME", "queue", () -> order("q".repeat(241)).build()),
                local("INVALID_HANDLER_REF", "handler_ref", () -> SubmitRequest.builder("x", "send email").build()),
                local("RESERVED_HEADER", "headers.RDQ.submitted_by",
                        () -> order("x").header("RDQ.submitted_by", "me").build()),
                local("INVALID_FIELD", "flow_key", () -> order("x").flowKey("a b").build()),
                local("INVALID_FIELD", "flow_key", () -> order("x").flowKey("k".repeat(129)).build()),
                local("INVALID_FIELD", "delay_ms", () -> order("x").delay(Duration.ofMillis(-1)).build()),
                // Refused by SCHEMA.submit.
                sql("INVALID_FIELD", "payload_content_type", () -> order("x").payloadContentType("").build()),
                sql("INVALID_FIELD", "payload_content_type", () -> order("x").payloadContentType("c".repeat(256)).build()),
                sql("INVALID_FIELD", "handler_version", () -> order("x").handlerVersion("v".repeat(256)).build()),
                sql("INVALID_FIELD", "idempotency_key", () -> order("x").idempotencyKey("").build()),
                sql("INVALID_FIELD", "idempotency_key", () -> order("x").idempotencyKey("k".repeat(256)).build()),
                sql("PAYLOAD_TOO_LARGE", "payload",
                        () -> SubmitRequest.builder("x", "h").payload(new byte[1024 * 1024]).build()),
                // Text PostgreSQL cannot hold, refused by TransactionalSubmit before sending.
                local("INVALID_FIELD", "handler_version", () -> order("x").handlerVersion("\0").build()),
                local("INVALID_FIELD", "payload_content_type", () -> order("x").payloadContentType("text/\0").build()),
                local("INVALID_FIELD", "idempotency_key", () -> order("x").idempotencyKey("k\0").build()),
                local("INVALID_FIELD", "headers", () -> order("x").header("k\0", "v").build()),
                local("INVALID_FIELD", "headers", () -> order("x").header("k", "v\0").build()),
                local("INVALID_FIELD", "headers", () -> order("x").header("k", "\ud800").build()),
                local("INVALID_FIELD", "headers", () -> order("x").correlationId("\0").build()));
        try (RdqServer server = RdqServer.start(RdqServer.Store.POSTGRES, null);
                RdqClient client = server.client();
                Connection db = open()) {
            String schema = server.schema();
            db.setAutoCommit(false);
            for (Bad b : bad) {
                RdqException e = assertThrows(RdqException.class,
                        () -> TransactionalSubmit.submit(db, schema, b.request().get()), b.toString());
                assertEquals(b.code(), e.code(), e.getMessage());
                assertEquals(b.field(), e.field().orElse(null), e.getMessage());
                assertFalse(e.detail().isEmpty());
                // A refusal PostgreSQL made aborted the transaction; one made
                // before sending left it as it was.
                try (Statement s = db.createStatement()) {
                    if (b.local()) {
                        assertDoesNotThrow(() -> s.execute("SELECT 1"), e.getMessage());
                    } else {
                        SQLException aborted = assertThrows(SQLException.class, () -> s.execute("SELECT 1"));
                        assertEquals("25P02", aborted.getSQLState());
                    }
                }
                db.rollback();
            }
            for (String s : Arrays.asList(null, "", "Rdq", "pg_rdq", "rdq; DROP TABLE x", "1rdq", "s".repeat(49))) {
                RdqException e = assertThrows(RdqException.class,
                        () -> TransactionalSubmit.submit(db, s, order("x").build()));
                assertEquals("INVALID_ARGUMENT", e.code());
            }
            assertDoesNotThrow(() -> TransactionalSubmit.statement("s".repeat(48)));

            // A queue's own limit applies.
            client.updateQueueConfig("small", JsonObject.builder().put("max_envelope_bytes", 600).build());
            RdqException e = assertThrows(RdqException.class, () -> TransactionalSubmit.submit(db, schema,
                    SubmitRequest.builder("small", "h").payload("x".repeat(400).getBytes(StandardCharsets.UTF_8)).build()));
            assertEquals("PAYLOAD_TOO_LARGE", e.code());
            db.rollback();
            TransactionalSubmit.submit(db, schema,
                    SubmitRequest.builder("small", "h").payload("x".repeat(100).getBytes(StandardCharsets.UTF_8)).build());
            db.commit();
            assertEquals(1, rows(db, schema), "a refused submit wrote a row");
        }
    }
}
