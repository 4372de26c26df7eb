package dev.rdq.pg;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.ClaimedTask;
import dev.rdq.client.RdqClient;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.Status;
import dev.rdq.support.RdqServer;
import dev.rdq.worker.TaskContext;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * {@link TransactionalComplete} against a real PostgreSQL, and a worker
 * whose handler completes its own task: each test on a schema of its own,
 * made by {@code rdq serve} and dropped afterwards.
 */
@DisplayName("completing inside a PostgreSQL transaction")
class TransactionalCompleteTest {

    static int receipts(Connection c, String schema, String id) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT count(*) FROM " + schema + ".receipts WHERE task_id = ?")) {
            ps.setString(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getInt(1);
            }
        }
    }

    /** The worker's settle refusals (logged at DEBUG), while it runs. */
    static final class Refusals extends Handler implements AutoCloseable {
        private final Logger logger = Logger.getLogger("dev.rdq.worker");
        private final Level was = logger.getLevel();
        final List<String> seen = Collections.synchronizedList(new ArrayList<>());

        Refusals() {
            logger.setLevel(Level.ALL);
            logger.addHandler(this);
        }

        @Override
        public void publish(LogRecord r) {
            if (r.getMessage() != null && r.getMessage().contains("refused")) {
                seen.add(r.getMessage());
            }
        }

        @Override
        public void flush() {}

        @Override
        public void close() {
            logger.removeHandler(this);
            logger.setLevel(was);
        }
    }

    @ParameterizedTest(name = "over {0}")
    @EnumSource(value = WorkerTransport.class, names = {"HTTP", "GRPC"})
    @DisplayName("a handler that writes its row and completes its task in one transaction succeeds once, and the worker settles nothing")
    void handlerCompletesInItsTransaction(WorkerTransport transport) throws Exception {
        int tasks = 3;
        try (RdqServer server = RdqServer.start(RdqServer.Store.POSTGRES, null);
                RdqClient client = server.client();
                Connection db = TransactionalSubmitTest.open();
                Refusals refusals = new Refusals()) {
            String schema = server.schema();
            try (Statement s = db.createStatement()) {
                s.execute("CREATE TABLE " + schema + ".receipts (task_id text PRIMARY KEY)");
            }
            List<String> ids = new ArrayList<>();
            for (int i = 0; i < tasks; i++) {
                ids.add(client.submit(TransactionalSubmitTest.order("receipts").build()).id());
            }
            CountDownLatch done = new CountDownLatch(tasks);
            // One handler slot: on the Work stream the later tasks come only
            // if the worker gave the credit back without a settle.
            try (Worker w = Worker.builder(client).transport(transport).concurrency(1)
                    .handler("receipts", "emails.send", (Envelope e) -> {
                        TaskContext ctx = TaskContext.current().orElseThrow();
                        try (Connection c = TransactionalSubmitTest.open()) {
                            c.setAutoCommit(false);
                            try (PreparedStatement ps = c.prepareStatement(
                                    "INSERT INTO " + schema + ".receipts VALUES (?)")) {
                                ps.setString(1, ctx.id());
                                ps.executeUpdate();
                            }
                            TransactionalComplete.complete(c, schema, ctx.id(), ctx.leaseToken());
                            c.commit();
                        }
                        ctx.settledElsewhere();
                        done.countDown();
                    })
                    .start()) {
                assertEquals(transport, w.transport());
                assertTrue(done.await(30, TimeUnit.SECONDS), "the worker did not run every task within 30 s");
            }
            for (String id : ids) {
                Envelope env = client.get(id);
                assertEquals(Status.SUCCEEDED, env.status(), id);
                assertEquals(1, env.attempts().size(), id);
                assertEquals(1, receipts(db, schema, id), id);
            }
            assertEquals(List.of(), refusals.seen, "the worker settled a task its handler completed");
        }
    }

    @Test
    @DisplayName("a stale lease token, after the task was claimed again, is LEASE_LOST; the current one completes it once")
    void staleTokenIsLeaseLost() throws Exception {
        try (RdqServer server = RdqServer.start(RdqServer.Store.POSTGRES, null);
                RdqClient client = server.client();
                Connection db = TransactionalSubmitTest.open()) {
            String schema = server.schema();
            String id = client.submit(TransactionalSubmitTest.order("orders").build()).id();
            ClaimedTask first = client.claim("orders", 1, 50L).get(0);
            List<ClaimedTask> again = List.of();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (again.isEmpty()) {
                assertTrue(System.nanoTime() < deadline, "not claimed again within 10 s of its lease's end");
                Thread.sleep(50);
                again = client.claim("orders", 1, 60_000L);
            }
            ClaimedTask second = again.get(0);
            assertEquals(id, second.id());

            db.setAutoCommit(false);
            RdqException e = assertThrows(RdqException.class,
                    () -> TransactionalComplete.complete(db, schema, id, first.leaseToken()));
            assertEquals("LEASE_LOST", e.code());
            assertEquals("lease_token", e.field().orElse(null));
            db.rollback();

            TransactionalComplete.complete(db, schema, id, second.leaseToken());
            db.commit();
            assertEquals(Status.SUCCEEDED, client.get(id).status());
            e = assertThrows(RdqException.class,
                    () -> TransactionalComplete.complete(db, schema, id, second.leaseToken()));
            assertEquals("LEASE_LOST", e.code(), "completing twice");
            db.rollback();
        }
    }

    @Test
    @DisplayName("malformed, forged and unknown are refused with rdq's codes")
    void refusals() throws Exception {
        try (RdqServer server = RdqServer.start(RdqServer.Store.POSTGRES, null);
                RdqClient client = server.client();
                Connection db = TransactionalSubmitTest.open()) {
            String schema = server.schema();
            String id = client.submit(TransactionalSubmitTest.order("orders").build()).id();
            ClaimedTask claimed = client.claim("orders", 1, 60_000L).get(0);
            String token = claimed.leaseToken();
            String forged = token.substring(0, token.indexOf('.') + 1) + "0".repeat(32);
            db.setAutoCommit(false);

            // Refused before anything is sent: the transaction goes on.
            String[][] local = {
                {"Rdq", id, token, "INVALID_ARGUMENT", null},
                {schema, "not-an-id", token, "INVALID_FIELD", "id"},
                {schema, id, "7", "INVALID_FIELD", "lease_token"},
                {schema, id, "4294967296." + "a".repeat(32), "INVALID_FIELD", "lease_token"},
            };
            for (String[] c : local) {
                RdqException e = assertThrows(RdqException.class, () -> TransactionalComplete.complete(db, c[0], c[1], c[2]));
                assertEquals(c[3], e.code(), String.join(" ", c[0], c[1], c[2]));
                assertEquals(c[4], e.field().orElse(null), String.join(" ", c[0], c[1], c[2]));
            }
            try (Statement s = db.createStatement()) {
                s.execute("SELECT 1");
            }

            RdqException e = assertThrows(RdqException.class, () -> TransactionalComplete.complete(db, schema, id, forged));
            assertEquals("LEASE_LOST", e.code());
            assertEquals("lease_token", e.field().orElse(null));
            assertTrue(e.getMessage().contains("not issued for task " + id), e.getMessage());
            db.rollback();

            // A task gone since its claim: the token is genuine, the task is not there.
            try (PreparedStatement ps = db.prepareStatement(
                    "DELETE FROM " + schema + ".tasks t WHERE " + schema + ".task_id_text(t.id) = ?")) {
                ps.setString(1, id);
                ps.executeUpdate();
            }
            db.commit();
            e = assertThrows(RdqException.class, () -> TransactionalComplete.complete(db, schema, id, token));
            assertEquals("TASK_NOT_FOUND", e.code());
            assertEquals("id", e.field().orElse(null));
            db.rollback();
        }
    }
}
