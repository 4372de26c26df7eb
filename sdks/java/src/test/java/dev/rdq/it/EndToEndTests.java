package dev.rdq.it;

import static dev.rdq.it.Support.awaitTask;
import static dev.rdq.it.Support.slowRetries;
import static dev.rdq.it.Support.submit;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.ClaimedTask;
import dev.rdq.client.DeadPage;
import dev.rdq.client.FlowKeyStatus;
import dev.rdq.client.QueueFlow;
import dev.rdq.client.RdqClient;
import dev.rdq.client.RedriveResult;
import dev.rdq.client.Settle;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.AttemptOutcome;
import dev.rdq.envelope.AttemptRecord;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.Names;
import dev.rdq.envelope.ErrorInfo;
import dev.rdq.envelope.Status;
import dev.rdq.json.JsonObject;
import dev.rdq.support.Await;
import dev.rdq.support.RdqServer;
import dev.rdq.worker.DeferException;
import dev.rdq.worker.Outcome;
import dev.rdq.worker.PermanentException;
import dev.rdq.worker.RetryableException;
import dev.rdq.worker.TaskContext;
import dev.rdq.worker.ThrottleException;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.net.SocketTimeoutException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * The client and the worker against a real {@code rdq serve}, one fresh
 * server (and store) per test. Subclasses choose the store.
 */
abstract class EndToEndTests {
    static final String Q = "java.e2e";

    RdqServer server;
    RdqClient client;
    final List<Worker> workers = new ArrayList<>();

    abstract RdqServer.Store store();

    /** The worker transport under test (each subclass runs the suite over gRPC and over HTTP). */
    abstract WorkerTransport transport();

    /** A worker builder over the transport under test. */
    Worker.Builder worker() {
        return Worker.builder(client).transport(transport());
    }

    @BeforeEach
    void startServer() {
        server = RdqServer.start(store(), null);
        client = server.client();
    }

    @AfterEach
    void stopServer() {
        for (Worker w : workers) {
            w.shutdown(Duration.ofSeconds(2));
        }
        server.close();
    }

    Worker start(Worker.Builder b) {
        Worker w = b.start();
        workers.add(w);
        return w;
    }

    static ErrorInfo lastError(Envelope e) {
        return e.lastError().orElseThrow(() -> new AssertionError("no error recorded: " + e));
    }

    static AttemptRecord lastAttempt(Envelope e) {
        return e.attempts().get(e.attempts().size() - 1);
    }

    // ------------------------------------------------------------------
    // Client

    @Test
    @DisplayName("submit carries payload, headers, priority, delay, handler version, correlation id and idempotency key")
    void submit_carries_every_option() {
        SubmitRequest req = SubmitRequest.builder(Q, "send-email")
                .payload("{\"to\":\"a@b.c\"}".getBytes(StandardCharsets.UTF_8), "application/json")
                .header("tenant", "acme").handlerVersion("v3").priority(7).delay(Duration.ofHours(1))
                .correlationId("req-42").idempotencyKey("order-42").flowKey("tenant-7").build();
        Envelope env = client.submit(req);
        assertEquals("tenant-7", env.header(Names.FLOW_KEY_HEADER).orElseThrow());
        assertEquals(Status.PENDING, env.status());
        assertEquals(7, env.priority());
        assertEquals("v3", env.handlerVersion().orElseThrow());
        assertEquals("acme", env.header("tenant").orElseThrow());
        assertEquals("req-42", env.header(SubmitRequest.CORRELATION_ID_HEADER).orElseThrow());
        assertTrue(env.nextAttemptAt().orElseThrow().isAfter(env.createdAt().plus(Duration.ofMinutes(59))));
        Envelope again = client.submit(req);
        assertEquals(env.id(), again.id(), "the idempotency key answers the original task");
        Envelope got = client.get(env.id());
        assertArrayEquals("{\"to\":\"a@b.c\"}".getBytes(StandardCharsets.UTF_8), got.payload());
        assertArrayEquals(env.encode(), got.encode());
        Envelope json = client.submit(SubmitRequest.builder(Q, "h").payloadJson("{\"n\": 1.000000000000000000001}").build());
        assertEquals("{\"n\": 1.000000000000000000001}", new String(json.payload(), StandardCharsets.UTF_8));
        assertEquals("application/json", json.payloadContentType());
    }

    @Test
    @DisplayName("batch submit issues concurrent single submits and answers every envelope in order")
    void batch_submit() {
        List<SubmitRequest> reqs = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            reqs.add(SubmitRequest.builder(Q, "h").payload(("task " + i).getBytes(StandardCharsets.UTF_8)).build());
        }
        List<Envelope> out = client.submitAll(reqs, 16);
        assertEquals(200, out.size());
        assertEquals(200, out.stream().map(Envelope::id).distinct().count());
        for (int i = 0; i < 200; i++) {
            assertEquals("task " + i, new String(out.get(i).payload(), StandardCharsets.UTF_8));
        }
    }

    @Test
    @DisplayName("server refusals carry the stable code, the field and the HTTP status")
    void refusals_carry_codes() {
        RdqException notFound = assertThrows(RdqException.class, () -> client.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0"));
        assertEquals("TASK_NOT_FOUND", notFound.code());
        assertEquals(404, notFound.httpStatus());
        RdqException badId = assertThrows(RdqException.class, () -> client.get("not-a-ulid"));
        assertEquals(400, badId.httpStatus());
        assertEquals("INVALID_QUEUE_NAME", assertThrows(RdqException.class,
                () -> client.claim("Bad Queue", 1, null)).code());
        Envelope env = submit(client, Q, "h", "x");
        ClaimedTask c = client.claim(Q, 1, null).get(0);
        assertEquals(env.id(), c.id());
        client.settleOne(Settle.success(c.id(), c.leaseToken()));
        RdqException stale = assertThrows(RdqException.class, () -> client.settleOne(Settle.success(c.id(), c.leaseToken())));
        assertEquals("LEASE_LOST", stale.code());
        assertEquals(409, stale.httpStatus());
        assertEquals("LEASE_LOST", assertThrows(RdqException.class,
                () -> client.extendLease(c.id(), c.leaseToken(), 1000)).code());
        RdqException policy = assertThrows(RdqException.class,
                () -> client.updateQueueConfig(Q, JsonObject.builder().put("max_attempts", 0).build()));
        assertEquals("INVALID_POLICY", policy.code());
    }

    @Test
    @DisplayName("a connection refused is CONNECTION_FAILED and an answer too slow is TIMEOUT")
    void transport_failures() throws Exception {
        int port;
        try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            port = s.getLocalPort();
        }
        RdqClient refused = RdqClient.builder("http://127.0.0.1:" + port).build();
        assertEquals(RdqException.CONNECTION_FAILED, assertThrows(RdqException.class,
                () -> refused.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0")).code());
        try (java.net.ServerSocket silent = new java.net.ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress())) {
            RdqClient slow = RdqClient.builder("http://127.0.0.1:" + silent.getLocalPort())
                    .requestTimeout(Duration.ofMillis(300)).build();
            assertEquals(RdqException.TIMEOUT, assertThrows(RdqException.class,
                    () -> slow.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0")).code());
        }
    }

    @Test
    @DisplayName("the DLQ can be listed, shown, exported and redriven")
    void dlq_operations() {
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ids.add(submit(client, Q, "h", "p" + i).id());
        }
        start(worker().handler(Q, task -> {
            throw new PermanentException(new IllegalArgumentException("bad input " + new String(task.payload(), StandardCharsets.UTF_8)));
        }));
        for (String id : ids) {
            awaitTask(client, id, "dead", e -> e.status() == Status.DEAD);
        }
        DeadPage page = client.listDead(Q, 2, null, null);
        assertEquals(2, page.items().size());
        assertTrue(page.nextCursor().isPresent());
        DeadPage rest = client.listDead(Q, 2, page.nextCursor().get(), null);
        assertEquals(1, rest.items().size());
        assertEquals(0, client.listDead(Q, 10, null, "java.io.*").items().size());
        assertEquals(3, client.listDead(Q, 10, null, "java.lang.IllegalArg*").items().size());
        Envelope shown = client.showDead(Q, ids.get(0));
        assertEquals("java.lang.IllegalArgumentException", lastError(shown).type());
        assertEquals("bad input p0", lastError(shown).message());
        List<Envelope> exported = client.exportDead(Q, null);
        assertEquals(3, exported.size());
        assertEquals(ids.get(0), exported.get(0).id(), "oldest first");
        RedriveResult dry = client.redrive(Q, List.of(ids.get(1)), null, null, true);
        assertTrue(dry.dryRun());
        assertEquals(1, dry.count());
        for (Worker w : workers) {
            w.close();
        }
        workers.clear();
        RedriveResult done = client.redrive(Q, List.of(ids.get(1)), null, null, false);
        assertEquals(List.of(ids.get(1)), done.ids());
        Envelope redriven = client.get(ids.get(1));
        assertEquals(Status.PENDING, redriven.status());
        assertEquals(1, redriven.redriveCount());
        assertEquals(0, redriven.attemptCount());
        assertEquals(1, redriven.attempts().size(), "history is kept");
        assertTrue(redriven.deadReason().isEmpty(), "a redrive removes the reason");
        Envelope still = client.showDead(Q, ids.get(0));
        assertEquals("PERMANENT_FAILURE", still.deadReason().orElseThrow().code());
        assertEquals(java.util.Map.of("PERMANENT_FAILURE", 2L), client.deadReasons(Q));
        assertEquals(2, client.listDead(Q, 10, null, null, "PERMANENT_FAILURE").items().size());
        assertEquals("INVALID_ARGUMENT", assertThrows(RdqException.class,
                () -> client.listDead(Q, 10, null, null, "permanent")).code());
    }

    @Test
    @DisplayName("pending tasks are listed, cancelled by filter with a dry run, and redriven by reason")
    void cancel_pending_tasks() {
        String cq = Q + ".cancel";
        List<String> ids = new ArrayList<>();
        for (String tenant : List.of("acme", "acme", "globex")) {
            ids.add(client.submit(SubmitRequest.builder(cq, "report").header("tenant", tenant).build()).id());
        }
        DeadPage pending = client.listTasks(cq, "PENDING", null, "tenant=acme", 10, null);
        assertEquals(List.of(ids.get(1), ids.get(0)), pending.items().stream().map(Envelope::id).toList());
        dev.rdq.client.CancelResult dry = client.cancel(cq,
                dev.rdq.client.CancelFilter.all().withHeaders(java.util.Map.of("tenant", "acme")).dryRun(true));
        assertEquals(List.of(ids.get(0), ids.get(1)), dry.ids());
        dev.rdq.client.CancelResult done = client.cancel(cq, dev.rdq.client.CancelFilter.ids(ids.get(0)).because("duplicate"));
        assertEquals(1, done.count());
        assertEquals("INVALID_TRANSITION", assertThrows(RdqException.class,
                () -> client.cancel(cq, dev.rdq.client.CancelFilter.ids(ids.get(0)))).code());
        Envelope dead = client.get(ids.get(0));
        assertEquals(Status.DEAD, dead.status());
        assertEquals("CANCELLED", dead.deadReason().orElseThrow().code());
        assertEquals("duplicate", dead.deadReason().orElseThrow().message().orElseThrow());
        assertEquals(1, client.redrive(cq, null, null, "CANCELLED", null, false).count());
        assertEquals(Status.PENDING, client.get(ids.get(0)).status());
    }

    // ------------------------------------------------------------------
    // Cancelling running tasks

    /**
     * Cancels one running task by id; the test is skipped (not failed) on a
     * server that cannot cancel running tasks: a store without cancel
     * ({@code 501 UNSUPPORTED}), or a server from before running tasks could
     * be cancelled (it refuses one as not PENDING).
     */
    static dev.rdq.client.CancelResult cancelRunning(RdqClient c, String queue, String id, String why) {
        try {
            return c.cancel(queue, dev.rdq.client.CancelFilter.ids(id).because(why));
        } catch (RdqException e) {
            Assumptions.assumeFalse("UNSUPPORTED".equals(e.code()) || e.httpStatus() == 501,
                    "the store cannot cancel tasks: " + e.getMessage());
            Assumptions.assumeFalse("INVALID_TRANSITION".equals(e.code())
                    && e.getMessage().contains("only PENDING tasks can be cancelled"),
                    "this rdq serve cannot cancel running tasks yet: " + e.getMessage());
            throw e;
        }
    }

    /** What a handler saw of its cancellation, as one line. */
    static String cancellation() {
        TaskContext ctx = TaskContext.current().orElseThrow();
        return ctx.isCancelled() + " " + ctx.cancelReason().map(Enum::name).orElse("-") + " "
                + ctx.cancelRequest().map(Object::toString).orElse("-");
    }

    @Test
    @DisplayName("a running task cancelled through the API: its handler sees isCancelled and the interrupt; the task ends DEAD (CANCELLED) with no attempt more")
    void cancel_running_task() throws Exception {
        String cq = Q + ".cancel.running";
        CountDownLatch started = new CountDownLatch(1);
        java.util.concurrent.BlockingQueue<String> seen = new java.util.concurrent.LinkedBlockingQueue<>();
        // A short lease: over HTTP the worker learns of the cancel on its next extension (a third of it).
        start(worker().leaseMs(1500).handler(cq, "block", task -> {
            started.countDown();
            try {
                Thread.sleep(60_000);
                seen.add("not interrupted");
            } catch (InterruptedException e) {
                seen.add(cancellation());
                throw e;
            }
        }));
        String id = submit(client, cq, "block", "{}").id();
        assertTrue(started.await(60, TimeUnit.SECONDS), "the handler did not start");
        dev.rdq.client.CancelResult r = cancelRunning(client, cq, id, "customer withdrew");
        assertEquals(List.of(id), r.ids());
        assertEquals(List.of(id), r.running());
        assertEquals(1, r.count());
        assertEquals("true CANCEL_REQUESTED cancelled by anonymous: customer withdrew", seen.poll(30, TimeUnit.SECONDS));

        Envelope dead = awaitTask(client, id, "dead", e -> e.status() == Status.DEAD);
        assertEquals("CANCELLED", dead.deadReason().orElseThrow().code());
        assertEquals("anonymous", dead.deadReason().orElseThrow().by(), "an open server's canceller");
        assertEquals("anonymous", dead.cancelRequested().orElseThrow().by());
        assertEquals("customer withdrew", dead.cancelRequested().orElseThrow().message().orElseThrow());
        assertEquals(1, dead.attempts().size(), "no attempt more");
        ErrorInfo err = lastError(dead);
        assertEquals("rdq.Cancelled", err.type());
        assertEquals("cancelled by anonymous: customer withdrew", err.message());
        assertTrue(err.stack().orElseThrow().contains("java.lang.InterruptedException"), err.stack().orElseThrow());
        assertEquals(1, client.listDead(cq, 10, null, null, "CANCELLED").items().size());
    }

    @Test
    @DisplayName("a handler that ignores the cancel and returns succeeds: the task is SUCCEEDED, the request kept as history")
    void cancel_ignored_succeeds() throws Exception {
        String cq = Q + ".cancel.ignored";
        CountDownLatch started = new CountDownLatch(1);
        java.util.concurrent.BlockingQueue<String> seen = new java.util.concurrent.LinkedBlockingQueue<>();
        start(worker().leaseMs(1500).handler(cq, "stubborn", task -> {
            started.countDown();
            try {
                Thread.sleep(60_000);
                seen.add("not interrupted");
            } catch (InterruptedException e) {
                seen.add(cancellation());
                // Finishes its work all the same.
            }
        }));
        String id = submit(client, cq, "stubborn", "{}").id();
        assertTrue(started.await(60, TimeUnit.SECONDS), "the handler did not start");
        assertEquals(List.of(id), cancelRunning(client, cq, id, "too late").running());
        assertEquals("true CANCEL_REQUESTED cancelled by anonymous: too late", seen.poll(30, TimeUnit.SECONDS));
        Envelope done = awaitTask(client, id, "succeeded", e -> e.status() == Status.SUCCEEDED);
        assertTrue(done.deadReason().isEmpty());
        assertEquals("anonymous", done.cancelRequested().orElseThrow().by());
        assertEquals(AttemptOutcome.SUCCESS, lastAttempt(done).outcome().orElseThrow());
    }

    @Test
    @DisplayName("pendingOnly cancels PENDING tasks and leaves running ones alone")
    void cancel_pending_only() throws Exception {
        String cq = Q + ".cancel.pending";
        CountDownLatch started = new CountDownLatch(1);
        CountDownLatch finish = new CountDownLatch(1);
        AtomicBoolean cancelled = new AtomicBoolean();
        start(worker().handler(cq, "h", task -> {
            started.countDown();
            assertTrue(finish.await(60, TimeUnit.SECONDS));
            cancelled.set(TaskContext.current().orElseThrow().isCancelled());
        }));
        String running = submit(client, cq, "h", "{}").id();
        assertTrue(started.await(60, TimeUnit.SECONDS), "the handler did not start");
        String later = client.submit(SubmitRequest.builder(cq, "h").delay(Duration.ofHours(1)).build()).id();
        dev.rdq.client.CancelResult r = client.cancel(cq, dev.rdq.client.CancelFilter.all().pendingOnly(true));
        assertEquals(List.of(later), r.ids());
        assertEquals(List.of(), r.running());
        finish.countDown();
        Envelope done = awaitTask(client, running, "succeeded", e -> e.status() == Status.SUCCEEDED);
        assertFalse(cancelled.get());
        assertTrue(done.cancelRequested().isEmpty());
        assertEquals("CANCELLED", client.get(later).deadReason().orElseThrow().code());
    }

    // ------------------------------------------------------------------
    // Worker and the ladder

    @Test
    @DisplayName("a worker runs every task to SUCCEEDED and the handler sees its payload")
    void worker_runs_tasks() {
        Map<String, String> seen = new ConcurrentHashMap<>();
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            ids.add(submit(client, Q, "echo", "n" + i).id());
        }
        Worker w = start(worker().concurrency(8).claimBatch(16)
                .handler(Q, "echo", task -> seen.put(task.id(), new String(task.payload(), StandardCharsets.UTF_8))));
        for (String id : ids) {
            Envelope e = awaitTask(client, id, "succeeded", t -> t.status() == Status.SUCCEEDED);
            assertEquals(AttemptOutcome.SUCCESS, lastAttempt(e).outcome().orElseThrow());
        }
        assertEquals(100, seen.size());
        assertEquals("n0", seen.get(ids.get(0)));
        assertFalse(w.inFlight() > 8);
        assertEquals(Runtime.version().feature() >= 21, w.usesVirtualThreads(), "virtual threads where the JDK has them");
    }

    record Charge(String account, long cents) {}

    @Test
    @DisplayName("typed handlers: the JSON payload bound to a record; a value handler's own typed mapper; an undecodable payload is dead at once")
    void typed_handlers() {
        slowRetries(client, Q, "");
        Map<String, Charge> seen = new ConcurrentHashMap<>();
        List<String> queueMapperSaw = new CopyOnWriteArrayList<>();
        String typed = submit(client, Q, "charge", "{\"account\":\"acme\",\"cents\":1250,\"note\":\"ignored\"}").id();
        String bad = submit(client, Q, "charge", "{\"account\":").id();
        String accepted = submit(client, Q, "verify", "{\"account\":\"ok\",\"cents\":1}").id();
        String refused = submit(client, Q, "verify", "{\"account\":\"no\",\"cents\":1}").id();
        start(worker()
                .handler(Q, "charge", Charge.class, c -> seen.put(TaskContext.current().orElseThrow().id(), c))
                .valueHandler(Q, "verify", Charge.class, c -> c.account().equals("ok"),
                        (Boolean ok, Throwable err) -> err != null ? null
                                : ok ? Outcome.success() : Outcome.permanent("verify.Refused", "refused"))
                .outcomeMapper(Q, (ret, err) -> {
                    queueMapperSaw.add(String.valueOf(ret));
                    return null;
                }));
        awaitTask(client, typed, "succeeded", e -> e.status() == Status.SUCCEEDED);
        assertEquals(new Charge("acme", 1250), seen.get(typed));
        Envelope b = awaitTask(client, bad, "dead", e -> e.status() == Status.DEAD);
        assertEquals(1, b.attemptCount());
        assertEquals("dev.rdq.worker.PayloadDecodeException", lastError(b).type());
        assertTrue(lastError(b).message().contains(Charge.class.getName()), lastError(b).message());
        assertFalse(seen.containsKey(bad));
        awaitTask(client, accepted, "succeeded", e -> e.status() == Status.SUCCEEDED);
        assertEquals("verify.Refused", lastError(awaitTask(client, refused, "dead", e -> e.status() == Status.DEAD)).type());
        // The queue's mapper decides for "charge" (it has no mapper of its own), never for "verify".
        assertEquals(List.of("null"), queueMapperSaw);
    }

    /** A handler class with its own timeout, as River's Timeout or JobRunr's @Job. */
    static final class SlowHandler implements dev.rdq.worker.Handler<String> {
        final List<String> observed = new CopyOnWriteArrayList<>();

        @Override
        public void handle(String payload) throws Exception {
            try {
                Thread.sleep(600_000);
            } catch (InterruptedException e) {
                TaskContext ctx = TaskContext.current().orElseThrow();
                observed.add(ctx.isCancelled() + " " + ctx.cancelReason().orElseThrow());
                throw e;
            }
        }

        @Override
        public Duration timeout() {
            return Duration.ofMillis(300);
        }
    }

    @Test
    @DisplayName("a handler past its timeout is cancelled and interrupted; the call fails as HandlerTimeoutException, retryable")
    void handler_timeout() {
        slowRetries(client, Q, "");
        String byClass = submit(client, Q, "slow", "x").id();
        String byBuilder = submit(client, Q, "lambda", "y").id();
        SlowHandler slow = new SlowHandler();
        List<Boolean> lambdaSawCancel = new CopyOnWriteArrayList<>();
        start(worker()
                .handler(Q, "slow", String.class, slow)
                .handler(Q, "lambda", task -> {
                    try {
                        Thread.sleep(600_000);
                    } finally {
                        lambdaSawCancel.add(TaskContext.current().orElseThrow().isCancelled());
                    }
                })
                .timeout(Q, "lambda", Duration.ofMillis(300)));
        for (String id : List.of(byClass, byBuilder)) {
            Envelope e = awaitTask(client, id, "retried", t -> t.attemptCount() == 1 && t.status() == Status.PENDING);
            assertEquals(AttemptOutcome.RETRYABLE_FAILURE, lastAttempt(e).outcome().orElseThrow());
            assertEquals("dev.rdq.worker.HandlerTimeoutException", lastError(e).type());
            assertTrue(lastError(e).stack().orElseThrow().contains("InterruptedException"), "the cause is what the handler threw");
        }
        assertEquals(List.of("true TIMEOUT"), slow.observed);
        assertEquals(List.of(true), lambdaSawCancel);
    }

    @Test
    @DisplayName("rung 1: the queue's OutcomeMapper is authoritative for returned values and thrown errors")
    void outcome_mapper_is_authoritative() {
        slowRetries(client, Q, "");
        String ok = submit(client, Q, "charge", "OK").id();
        String throttled = submit(client, Q, "charge", "THROTTLED").id();
        String rejected = submit(client, Q, "charge", "REJECTED").id();
        String replay = submit(client, Q, "charge", "REPLAY").id();
        start(worker()
                .nonRetryableErrors(IllegalStateException.class)
                .valueHandler(Q, "charge", task -> {
                    String s = new String(task.payload(), StandardCharsets.UTF_8);
                    if (s.equals("REPLAY")) {
                        throw new IllegalStateException("already processed");
                    }
                    return s.equals("OK");
                })
                .outcomeMapper(Q, (ret, err) -> {
                    if (err instanceof IllegalStateException) {
                        return Outcome.success(); // an idempotent replay
                    }
                    if (Boolean.TRUE.equals(ret)) {
                        return Outcome.success();
                    }
                    String s = new String(TaskContext.current().orElseThrow().task().payload(), StandardCharsets.UTF_8);
                    return s.equals("THROTTLED") ? Outcome.retryable("billing.Throttled", "downstream throttled")
                            : Outcome.permanent(ErrorInfo.of("billing.Rejected", "rejected: " + s)
                                    .withDetail(JsonObject.builder().put("status", s).build()));
                }));
        awaitTask(client, ok, "ok", e -> e.status() == Status.SUCCEEDED);
        awaitTask(client, replay, "replay", e -> e.status() == Status.SUCCEEDED);
        Envelope t = awaitTask(client, throttled, "retry", e -> e.attemptCount() == 1 && e.status() == Status.PENDING);
        assertEquals(AttemptOutcome.RETRYABLE_FAILURE, lastAttempt(t).outcome().orElseThrow());
        assertEquals("billing.Throttled", lastError(t).type());
        Envelope r = awaitTask(client, rejected, "dead", e -> e.status() == Status.DEAD);
        assertEquals("billing.Rejected", lastError(r).type());
        assertEquals("rejected: REJECTED", lastError(r).message());
        assertEquals("{\"status\":\"REJECTED\"}", lastError(r).detail().orElseThrow().toJson());
    }

    @Test
    @DisplayName("rung 2: per-call wrappers and returned outcomes force the decision over the lists and globs")
    void per_call_wrappers_win() {
        slowRetries(client, Q, "\"non_retryable_errors\":[\"*\"]");
        String forcedRetry = submit(client, Q, "h", "retry").id();
        String forcedPermanent = submit(client, Q, "h", "permanent").id();
        String returned = submit(client, Q, "v", "x").id();
        start(worker()
                .retryableErrors(SocketTimeoutException.class)
                .nonRetryableErrors(IllegalArgumentException.class)
                .handler(Q, "h", task -> {
                    if (new String(task.payload(), StandardCharsets.UTF_8).equals("retry")) {
                        throw new RetryableException(new IllegalArgumentException("listed non-retryable, forced retry"));
                    }
                    throw new PermanentException(new SocketTimeoutException("listed retryable, forced permanent"));
                })
                .valueHandler(Q, "v", task -> Outcome.permanent("custom.Type", "returned outcome")));
        Envelope r = awaitTask(client, forcedRetry, "retried", e -> e.attemptCount() == 1 && e.status() == Status.PENDING);
        assertEquals(AttemptOutcome.RETRYABLE_FAILURE, lastAttempt(r).outcome().orElseThrow());
        assertEquals("java.lang.IllegalArgumentException", lastError(r).type(), "the wrapper records its cause");
        Envelope p = awaitTask(client, forcedPermanent, "dead", e -> e.status() == Status.DEAD);
        assertEquals(1, p.attemptCount());
        assertEquals("java.net.SocketTimeoutException", lastError(p).type());
        Envelope v = awaitTask(client, returned, "dead", e -> e.status() == Status.DEAD);
        assertEquals("custom.Type", lastError(v).type());
    }

    static class CardDeclinedException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        CardDeclinedException(String m) {
            super(m);
        }
    }

    static final class ExpiredCardException extends CardDeclinedException {
        private static final long serialVersionUID = 1L;

        ExpiredCardException(String m) {
            super(m);
        }
    }

    @Test
    @DisplayName("rung 3: exception lists match subclasses and causes, and a non-retryable match wins")
    void exception_lists() {
        slowRetries(client, Q, "");
        String subclass = submit(client, Q, "h", "subclass").id();
        String retry = submit(client, Q, "h", "retry").id();
        String both = submit(client, Q, "h", "both").id();
        start(worker()
                .retryableErrors(SocketTimeoutException.class, UncheckedIOException.class)
                .nonRetryableErrors(CardDeclinedException.class)
                .handler(Q, "h", task -> {
                    switch (new String(task.payload(), StandardCharsets.UTF_8)) {
                        case "subclass":
                            throw new ExpiredCardException("expired");
                        case "retry":
                            throw new SocketTimeoutException("connect timed out");
                        default:
                            // Retryable on top, non-retryable in the cause chain: non-retryable wins.
                            throw new UncheckedIOException(new java.io.IOException("io", new CardDeclinedException("declined")));
                    }
                }));
        Envelope s = awaitTask(client, subclass, "dead", e -> e.status() == Status.DEAD);
        assertEquals(ExpiredCardException.class.getName(), lastError(s).type());
        assertEquals(AttemptOutcome.PERMANENT_FAILURE, lastAttempt(s).outcome().orElseThrow());
        Envelope r = awaitTask(client, retry, "retried", e -> e.attemptCount() == 1 && e.status() == Status.PENDING);
        assertEquals("java.net.SocketTimeoutException", lastError(r).type());
        Envelope b = awaitTask(client, both, "dead", e -> e.status() == Status.DEAD);
        assertEquals("java.io.UncheckedIOException", lastError(b).type(), "error_type is the thrown class");
        assertTrue(lastError(b).stack().orElseThrow().contains("CardDeclinedException"), "the stack shows the causes");
    }

    @Test
    @DisplayName("rungs 4 and 5: the queue's globs classify what nothing above did; non-retryable wins; default retryable")
    void config_globs_then_default() {
        slowRetries(client, Q, "\"non_retryable_errors\":[\"java.lang.IllegalState*\"],"
                + "\"retryable_errors\":[\"java.lang.*\"]");
        String glob = submit(client, Q, "h", "glob").id();
        String fallback = submit(client, Q, "h", "other").id();
        start(worker().handler(Q, "h", task -> {
            if (new String(task.payload(), StandardCharsets.UTF_8).equals("glob")) {
                throw new IllegalStateException("matches both globs");
            }
            throw new java.io.IOException("matches no glob");
        }));
        Envelope g = awaitTask(client, glob, "dead", e -> e.status() == Status.DEAD);
        assertEquals("java.lang.IllegalStateException", lastError(g).type());
        assertEquals(1, g.attemptCount());
        Envelope d = awaitTask(client, fallback, "retried", e -> e.attemptCount() == 1 && e.status() == Status.PENDING);
        assertEquals(AttemptOutcome.RETRYABLE_FAILURE, lastAttempt(d).outcome().orElseThrow());
        assertEquals("java.io.IOException", lastError(d).type());
    }

    @Test
    @DisplayName("a StackOverflowError is a retryable failure with a truncated stack, and the worker keeps working")
    void errors_do_not_kill_the_worker() {
        slowRetries(client, Q, "");
        String overflow = submit(client, Q, "h", "overflow").id();
        String longMessage = submit(client, Q, "h", "long").id();
        start(worker().concurrency(1).handler(Q, "h", task -> {
            String p = new String(task.payload(), StandardCharsets.UTF_8);
            if (p.equals("overflow")) {
                recurse(0);
            } else if (p.equals("long")) {
                throw new IllegalStateException("é".repeat(10_000));
            }
        }));
        Envelope o = awaitTask(client, overflow, "retried", e -> e.attemptCount() == 1 && e.status() == Status.PENDING);
        assertEquals("java.lang.StackOverflowError", lastError(o).type());
        assertEquals(AttemptOutcome.RETRYABLE_FAILURE, lastAttempt(o).outcome().orElseThrow());
        String stack = lastError(o).stack().orElseThrow();
        assertTrue(stack.getBytes(StandardCharsets.UTF_8).length <= 64 * 1024);
        Envelope l = awaitTask(client, longMessage, "retried", e -> e.attemptCount() == 1 && e.status() == Status.PENDING);
        String m = lastError(l).message();
        assertTrue(m.endsWith("…[truncated]"), m.substring(Math.max(0, m.length() - 20)));
        assertTrue(m.getBytes(StandardCharsets.UTF_8).length <= 4096);
        String after = submit(client, Q, "h", "fine").id();
        awaitTask(client, after, "the next task succeeds", e -> e.status() == Status.SUCCEEDED);
    }

    static int recurse(int n) {
        return recurse(n + 1) + 1;
    }

    @Test
    @DisplayName("a DeferException defers the task without spending an attempt")
    void deferral() {
        String id = submit(client, Q, "h", "x").id();
        start(worker().handler(Q, "h", task -> {
            throw new DeferException(Duration.ofHours(1));
        }));
        Envelope e = awaitTask(client, id, "deferred", t -> t.deferralCount() == 1);
        assertEquals(Status.PENDING, e.status());
        assertEquals(0, e.attemptCount());
        assertTrue(e.nextAttemptAt().orElseThrow().isAfter(e.createdAt().plus(Duration.ofMinutes(59))));
    }

    // ------------------------------------------------------------------
    // Flow control

    /** Gives the queue a flow section, which the flow status and throttles need. */
    void flowLimits(String name, long value) {
        client.updateQueueConfig(Q, JsonObject.builder().put("flow", JsonObject.builder().put(name, value).build()).build());
    }

    Envelope submitKeyed(String handler, String flowKey) {
        return client.submit(SubmitRequest.builder(Q, handler).flowKey(flowKey).build());
    }

    @Test
    @DisplayName("a ThrottleException holds back its flow key until the deferral is due; another key runs meanwhile")
    void throttle_holds_back_the_flow_key() {
        flowLimits("key_concurrency", 8);
        Duration hold = Duration.ofSeconds(3);
        Map<String, Integer> calls = new ConcurrentHashMap<>();
        Map<String, Instant> started = new ConcurrentHashMap<>();
        start(worker().concurrency(4).pollInterval(Duration.ofMillis(20))
                .handler(Q, "push-back", task -> {
                    if (calls.merge(task.id(), 1, Integer::sum) == 1) {
                        throw new ThrottleException(hold);
                    }
                })
                .handler(Q, "record", task -> started.put(task.id(), Instant.now())));
        String first = submitKeyed("push-back", "upstream-a").id();
        awaitTask(client, first, "deferred", e -> e.deferralCount() == 1);
        // The server throttles right after it has stored the deferral: wait for both.
        QueueFlow flow = Await.until("the key throttle", Duration.ofSeconds(30), () -> {
            QueueFlow f = client.queueFlow(Q);
            return f.key("upstream-a").flatMap(FlowKeyStatus::blockedUntil).isPresent() ? f : null;
        });
        assertEquals(Q, flow.queue());
        assertEquals(8L, flow.limits().integer("key_concurrency").orElseThrow(), flow.toString());
        assertTrue(flow.blockedUntil().isEmpty(), "the queue is not throttled: " + flow);
        Instant until = flow.key("upstream-a").flatMap(FlowKeyStatus::blockedUntil).orElseThrow();

        String same = submitKeyed("record", "upstream-a").id();
        String other = submitKeyed("record", "upstream-b").id();
        awaitTask(client, other, "succeeded", e -> e.status() == Status.SUCCEEDED);
        awaitTask(client, same, "succeeded", e -> e.status() == Status.SUCCEEDED);
        Envelope done = awaitTask(client, first, "succeeded", e -> e.status() == Status.SUCCEEDED);
        assertEquals(1, done.attemptCount(), "the throttle spent no attempt");
        assertFalse(started.get(same).isBefore(until),
                "a task of the throttled key started at " + started.get(same) + ", before the throttle's end " + until);
        assertTrue(started.get(other).isBefore(until),
                "the other key waited for the throttle: started " + started.get(other) + ", throttle ended " + until);
    }

    @Test
    @DisplayName("a queue-scope ThrottleException and RdqClient.throttle show in the flow status; a bad flow key is refused locally")
    void queue_throttle_and_refusals() {
        flowLimits("concurrency", 8);
        RdqException bad = assertThrows(RdqException.class, () -> client.throttle(Q, "bad key", Duration.ofSeconds(1)));
        assertEquals("INVALID_FIELD", bad.code());
        assertEquals("flow_key", bad.field().orElseThrow());
        assertEquals(0, bad.httpStatus(), "refused before any request");
        AtomicBoolean once = new AtomicBoolean();
        start(worker().pollInterval(Duration.ofMillis(20)).handler(Q, "stop-all", task -> {
            if (once.compareAndSet(false, true)) {
                throw ThrottleException.queue(Duration.ofMinutes(1));
            }
        }));
        String first = submitKeyed("stop-all", "k").id();
        awaitTask(client, first, "deferred", e -> e.deferralCount() == 1);
        QueueFlow flow = Await.until("the queue throttle", Duration.ofSeconds(30), () -> {
            QueueFlow f = client.queueFlow(Q);
            return f.blockedUntil().isPresent() ? f : null;
        });
        Instant queueUntil = flow.blockedUntil().orElseThrow();
        assertTrue(queueUntil.isAfter(Instant.now().plusSeconds(30)), "the queue is not throttled for a minute: " + flow);

        QueueFlow keyed = client.throttle(Q, "k", Duration.ofMinutes(2));
        assertEquals(1, keyed.keys().size(), keyed.toString());
        assertEquals("k", keyed.keys().get(0).key());
        Instant keyUntil = keyed.keys().get(0).blockedUntil()
                .orElseThrow(() -> new AssertionError("the key throttle is not shown: " + keyed));
        assertTrue(keyUntil.isAfter(Instant.now().plusSeconds(90)), keyed.toString());
        assertEquals(Optional.of(queueUntil), keyed.blockedUntil(), "the queue throttle stands");

        QueueFlow shorter = client.throttle(Q, null, Duration.ofSeconds(1));
        assertEquals(Optional.of(queueUntil), shorter.blockedUntil(), "a later throttle is never shortened");
        RdqException zero = assertThrows(RdqException.class, () -> client.throttle(Q, null, Duration.ZERO));
        assertEquals("INVALID_FIELD", zero.code());
        assertEquals("for_ms", zero.field().orElseThrow());
        assertEquals(400, zero.httpStatus());

        Instant until = Instant.now().plusSeconds(300).truncatedTo(java.time.temporal.ChronoUnit.MILLIS);
        QueueFlow byTime = client.throttle(Q, "k2", until);
        assertEquals(Optional.of(until), byTime.key("k2").orElseThrow().blockedUntil(), byTime.toString());
        RdqException past = assertThrows(RdqException.class,
                () -> client.throttle(Q, "k2", Instant.now().minusSeconds(60)));
        assertEquals("INVALID_FIELD", past.code());
        assertEquals("until", past.field().orElseThrow());
        assertEquals(Status.PENDING, client.get(first).status());
    }

    @Test
    @DisplayName("the dead-letter listener hears of every task a settle dead-lettered, and an unknown handler is permanent")
    void dead_letter_listener() {
        List<Envelope> dead = new CopyOnWriteArrayList<>();
        String id = submit(client, Q, "nobody-handles-this", "x").id();
        start(worker().handler(Q, "known", task -> {}).onDeadLetter(dead::add));
        Await.until("the listener is called", () -> dead.size() == 1);
        assertEquals(id, dead.get(0).id());
        assertEquals(Status.DEAD, dead.get(0).status());
        assertEquals("dev.rdq.worker.UnknownHandlerException", lastError(dead.get(0)).type());
    }

    // ------------------------------------------------------------------
    // Leases and shutdown

    @Test
    @DisplayName("the lease of a handler that outlives it is extended automatically")
    void lease_is_extended() {
        client.updateQueueConfig(Q, JsonObject.builder().put("lease_ms", 1500).build());
        String id = submit(client, Q, "slow", "x").id();
        start(worker().handler(Q, "slow", task -> Thread.sleep(4_000)));
        Envelope e = awaitTask(client, id, "succeeded", t -> t.status() == Status.SUCCEEDED);
        assertEquals(1, e.attempts().size(), "no LEASE_EXPIRED attempt: " + e);
        assertEquals(AttemptOutcome.SUCCESS, e.attempts().get(0).outcome().orElseThrow());
        assertEquals(1, e.claimCount());
    }

    @Test
    @DisplayName("a handler whose lease is lost is interrupted and its task is not settled")
    void lost_lease_interrupts() throws Exception {
        String id = submit(client, Q, "h", "x").id();
        CountDownLatch started = new CountDownLatch(1);
        AtomicBoolean interrupted = new AtomicBoolean();
        CountDownLatch done = new CountDownLatch(1);
        start(worker().leaseMs(900).handler(Q, "h", task -> {
            started.countDown();
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                interrupted.set(true);
                throw e;
            } finally {
                done.countDown();
            }
        }));
        assertTrue(started.await(30, TimeUnit.SECONDS));
        // Deleting the task takes the lease away: the next extension is refused.
        HttpResponse<String> del = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(server.url().resolve("/v1/tasks/" + id)).DELETE().build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(204, del.statusCode(), del.body());
        assertTrue(done.await(30, TimeUnit.SECONDS), "the handler was not interrupted");
        assertTrue(interrupted.get());
    }

    @Test
    @DisplayName("close() lets a running handler finish within the grace")
    void graceful_shutdown_finishes_work() throws Exception {
        String id = submit(client, Q, "h", "x").id();
        CountDownLatch started = new CountDownLatch(1);
        Worker w = worker().shutdownGrace(Duration.ofSeconds(20)).handler(Q, "h", task -> {
            started.countDown();
            Thread.sleep(500);
        }).start();
        assertTrue(started.await(30, TimeUnit.SECONDS));
        w.close();
        assertEquals(Status.SUCCEEDED, client.get(id).status(), "settled before close() returned");
    }

    @Test
    @DisplayName("shutdown past the grace interrupts the handler and hands its task back with no attempt spent")
    void shutdown_releases_unfinished_work() throws Exception {
        String id = submit(client, Q, "h", "x").id();
        CountDownLatch started = new CountDownLatch(1);
        Worker w = worker().handler(Q, "h", task -> {
            started.countDown();
            Thread.sleep(600_000);
        }).start();
        assertTrue(started.await(30, TimeUnit.SECONDS));
        w.shutdown(Duration.ofMillis(300));
        Envelope e = client.get(id);
        assertEquals(Status.PENDING, e.status(), e.toString());
        assertEquals(0, e.attemptCount());
        assertEquals(1, e.claimCount());
        assertEquals(0, w.inFlight());
    }

    @Test
    @DisplayName("a worker JVM killed with SIGKILL mid-task leaves it to the reaper: a LEASE_EXPIRED attempt, then due again")
    void killed_worker_task_comes_back() throws Exception {
        client.updateQueueConfig(Q, JsonObject.builder().put("lease_ms", 1000).build());
        String id = submit(client, Q, "h", "x").id();
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                KillableWorkerMain.class.getName(), server.url().toString(), Q, transport().name())
                .redirectErrorStream(true).start();
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
            String line;
            while ((line = out.readLine()) != null && !line.startsWith("RUNNING ")) {
                // JVM noise before the handler starts.
            }
            assertEquals("RUNNING " + id, line);
            assertEquals(Status.IN_FLIGHT, client.get(id).status());
        } finally {
            child.destroyForcibly().waitFor();
        }
        Envelope e = awaitTask(client, id, "lease expired", t -> t.attempts().size() == 1
                && t.attempts().get(0).outcome().isPresent());
        AttemptRecord a = e.attempts().get(0);
        assertEquals(AttemptOutcome.LEASE_EXPIRED, a.outcome().orElseThrow());
        assertEquals("rdq.LeaseExpired", a.error().orElseThrow().type());
        assertNotEquals(Status.IN_FLIGHT, e.status());
        assertEquals(1, e.attemptCount());
        start(worker().handler(Q, "h", task -> {}));
        Envelope done = awaitTask(client, id, "succeeded", t -> t.status() == Status.SUCCEEDED);
        assertEquals(2, done.attempts().size());
    }
}
