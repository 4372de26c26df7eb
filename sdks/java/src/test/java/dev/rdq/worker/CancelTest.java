package dev.rdq.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.client.RdqClient;
import dev.rdq.client.Transport;
import dev.rdq.envelope.CancelRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.json.Json;
import dev.rdq.json.JsonArray;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonValue;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import rdq.v1.Api;
import rdq.v1.EnvelopeOuterClass;
import rdq.v1.TasksGrpc;
import rdq.v1.WorkersGrpc;

/**
 * How a cancel asked of a running task reaches its handler, against fakes: a
 * scripted gRPC server (a {@code WorkCancel} on the Work stream, the {@code
 * cancel_requested} flag of an extension's result) and a scripted HTTP
 * transport (the envelope a lease extension answers). The handler sees
 * {@link TaskContext#isCancelled()} and its interrupt once; a failure is
 * reported as {@code rdq.Cancelled}, a success still counts; shutdown and
 * cancel are never taken for each other.
 */
@DisplayName("cancelling a running task")
class CancelTest {
    static final String A = WorkStreamTest.TASK_A;
    static final String B = WorkStreamTest.TASK_B;
    static final String C = "01J2ZK7Q8XW5H3N9G4T6B8RDQ2";
    static final String ASKED_AT = "2026-07-20T14:03:30.000Z";

    /** What a handler saw of its cancellation. */
    record Seen(String id, boolean cancelled, CancelReason reason, Optional<CancelRequest> request,
            boolean interruptedAtStart) {
        static Seen now(boolean interruptedAtStart) {
            TaskContext c = TaskContext.current().orElseThrow();
            return new Seen(c.id(), c.isCancelled(), c.cancelReason().orElse(null), c.cancelRequest(),
                    interruptedAtStart);
        }
    }

    // ------------------------------------------------------------------
    // A scripted Work stream

    final BlockingQueue<Api.SettleRequest> settled = new LinkedBlockingQueue<>();
    final BlockingQueue<Api.WorkRequest> received = new LinkedBlockingQueue<>();
    /** Per task id: what a WorkExtend's result says. */
    final Map<String, Api.SettleItemResult> extendResults = new ConcurrentHashMap<>();
    /** Per task id: what Tasks/Get answers (none: NOT_FOUND). */
    final Map<String, EnvelopeOuterClass.Envelope> tasks = new ConcurrentHashMap<>();
    final CountDownLatch hello = new CountDownLatch(1);
    volatile StreamObserver<Api.WorkResponse> out;
    Server server;

    @BeforeEach
    void startServer() throws Exception {
        server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
                .addService(new WorkersGrpc.WorkersImplBase() {
                    @Override
                    public StreamObserver<Api.WorkRequest> work(StreamObserver<Api.WorkResponse> stream) {
                        return new StreamObserver<>() {
                            @Override
                            public void onNext(Api.WorkRequest r) {
                                received.add(r);
                                if (r.hasHello()) {
                                    out = stream;
                                    hello.countDown();
                                } else if (r.hasSettle()) {
                                    Api.WorkAck.Builder ack = Api.WorkAck.newBuilder().setSeq(r.getSettle().getSeq());
                                    for (Api.SettleRequest s : r.getSettle().getSettlesList()) {
                                        settled.add(s);
                                        ack.addResults(Api.SettleItemResult.newBuilder().setId(s.getId()));
                                    }
                                    push(Api.WorkResponse.newBuilder().setAck(ack).build());
                                } else if (r.hasExtend()) {
                                    String id = r.getExtend().getExtend().getId();
                                    push(Api.WorkResponse.newBuilder().setAck(Api.WorkAck.newBuilder()
                                            .setSeq(r.getExtend().getSeq())
                                            .addResults(extendResults.getOrDefault(id,
                                                    Api.SettleItemResult.newBuilder().setId(id).build())))
                                            .build());
                                }
                            }

                            @Override
                            public void onError(Throwable t) {}

                            @Override
                            public void onCompleted() {
                                stream.onCompleted();
                            }
                        };
                    }

                    @Override
                    public void settleBatch(Api.SettleBatchRequest req, StreamObserver<Api.SettleBatchResponse> resp) {
                        Api.SettleBatchResponse.Builder b = Api.SettleBatchResponse.newBuilder();
                        for (Api.SettleRequest s : req.getSettlesList()) {
                            settled.add(s);
                            b.addResults(Api.SettleItemResult.newBuilder().setId(s.getId()));
                        }
                        resp.onNext(b.build());
                        resp.onCompleted();
                    }
                })
                .addService(new TasksGrpc.TasksImplBase() {
                    @Override
                    public void get(Api.GetTaskRequest req, StreamObserver<Api.TaskResponse> resp) {
                        EnvelopeOuterClass.Envelope e = tasks.get(req.getId());
                        if (e == null) {
                            resp.onError(Status.NOT_FOUND.asRuntimeException());
                            return;
                        }
                        resp.onNext(Api.TaskResponse.newBuilder().setEnvelope(e).build());
                        resp.onCompleted();
                    }
                })
                .build()
                .start();
    }

    @AfterEach
    void stopServer() throws Exception {
        server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }

    synchronized void push(Api.WorkResponse r) {
        out.onNext(r);
    }

    void pushTask(String id, String handlerRef) throws InterruptedException {
        assertTrue(hello.await(30, TimeUnit.SECONDS), "no hello");
        push(WorkStreamTest.task(WorkStreamTest.envelope(id, handlerRef, "{}")));
    }

    void pushCancel(String id, String leaseToken, EnvelopeOuterClass.CancelRequest.Builder request) {
        push(Api.WorkResponse.newBuilder().setCancel(Api.WorkCancel.newBuilder().setId(id).setLeaseToken(leaseToken)
                .setRequest(request)).build());
    }

    static EnvelopeOuterClass.CancelRequest.Builder request(String by, String message) {
        EnvelopeOuterClass.CancelRequest.Builder b = EnvelopeOuterClass.CancelRequest.newBuilder().setAt(ASKED_AT).setBy(by);
        return message == null ? b.addOmitted("message") : b.setMessage(message);
    }

    Worker.Builder grpcWorker(RdqClient client) {
        return Worker.builder(client).transport(WorkerTransport.GRPC);
    }

    RdqClient client() {
        return RdqClient.builder("http://127.0.0.1:" + server.getPort()).build();
    }

    Api.SettleRequest settleOf(String id) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        List<Api.SettleRequest> others = new ArrayList<>();
        try {
            while (System.nanoTime() < deadline) {
                Api.SettleRequest s = settled.poll(100, TimeUnit.MILLISECONDS);
                if (s != null && s.getId().equals(id)) {
                    return s;
                }
                if (s != null) {
                    others.add(s);
                }
            }
            throw new AssertionError("no settle of " + id);
        } finally {
            settled.addAll(others);
        }
    }

    /**
     * Returns once the worker has read everything the scripted server sent
     * before: a lease extension's ack comes after it on the same stream, and
     * the worker reads a stream in order.
     */
    static void barrier() {
        TaskContext.current().orElseThrow().extendLease(Duration.ofSeconds(30));
    }

    /** Sleeps until interrupted; false when {@code max} passed first. */
    static boolean sleepUntilInterrupted(Duration max) {
        try {
            Thread.sleep(max.toMillis());
            return false;
        } catch (InterruptedException e) {
            return true;
        }
    }

    // ------------------------------------------------------------------
    // The Work stream

    @Test
    @DisplayName("a WorkCancel interrupts the handler once; it sees who asked; its failure is rdq.Cancelled; the next task on the thread is not interrupted")
    void work_cancel_interrupts_once() throws Exception {
        BlockingQueue<Seen> seen = new LinkedBlockingQueue<>();
        AtomicInteger interrupts = new AtomicInteger();
        CountDownLatch started = new CountDownLatch(1);
        CountDownLatch cancelledAgain = new CountDownLatch(1);
        try (RdqClient client = client();
                Worker w = grpcWorker(client).concurrency(1).virtualThreads(false)
                        .handler("stream.q", "block", (Envelope e) -> {
                            started.countDown();
                            if (sleepUntilInterrupted(Duration.ofSeconds(30))) {
                                interrupts.incrementAndGet();
                            }
                            seen.add(Seen.now(false));
                            // A second notice of the same cancel interrupts no more.
                            assertTrue(cancelledAgain.await(30, TimeUnit.SECONDS));
                            barrier();
                            if (sleepUntilInterrupted(Duration.ofMillis(300))) {
                                interrupts.incrementAndGet();
                            }
                            throw new InterruptedException("stopped");
                        })
                        .handler("stream.q", "next", (Envelope e) -> seen.add(Seen.now(Thread.currentThread().isInterrupted())))
                        .start()) {
            assertEquals(WorkerTransport.GRPC, w.transport());
            assertFalse(w.usesVirtualThreads());
            pushTask(A, "block");
            assertTrue(started.await(30, TimeUnit.SECONDS));
            pushCancel(A, "token-" + A, request("ops@example.com", "customer withdrew"));
            Seen a = seen.poll(30, TimeUnit.SECONDS);
            assertNotNull(a, "the handler was not interrupted");
            pushCancel(A, "token-" + A, request("someone-else", null));
            cancelledAgain.countDown();
            pushTask(B, "next");

            Api.SettleRequest s = settleOf(A);
            assertEquals(1, interrupts.get(), "interrupted once");
            assertTrue(a.cancelled());
            assertEquals(CancelReason.CANCEL_REQUESTED, a.reason());
            CancelRequest r = a.request().orElseThrow();
            assertEquals("ops@example.com", r.by());
            assertEquals(Instant.parse(ASKED_AT), r.at());
            assertEquals("customer withdrew", r.message().orElseThrow());
            assertEquals(Api.ReportedOutcome.REPORTED_PERMANENT_FAILURE, s.getOutcome());
            assertEquals("rdq.Cancelled", s.getError().getType());
            assertEquals("cancelled by ops@example.com: customer withdrew", s.getError().getMessage());
            assertTrue(s.getError().getStack().contains("java.lang.InterruptedException: stopped"), s.getError().getStack());

            assertEquals(Api.ReportedOutcome.REPORTED_SUCCESS, settleOf(B).getOutcome());
            Seen b = seen.poll(30, TimeUnit.SECONDS);
            assertEquals(new Seen(B, false, null, Optional.empty(), false), b, "the pooled thread carried nothing over");
        }
    }

    @Test
    @DisplayName("a handler that ignores the cancel and returns succeeds")
    void ignoring_the_cancel_succeeds() throws Exception {
        BlockingQueue<Seen> seen = new LinkedBlockingQueue<>();
        CountDownLatch started = new CountDownLatch(1);
        try (RdqClient client = client();
                Worker w = grpcWorker(client)
                        .handler("stream.q", "stubborn", (Envelope e) -> {
                            started.countDown();
                            boolean interrupted = sleepUntilInterrupted(Duration.ofSeconds(30));
                            seen.add(Seen.now(interrupted));
                        })
                        .start()) {
            assertEquals(WorkerTransport.GRPC, w.transport());
            pushTask(A, "stubborn");
            assertTrue(started.await(30, TimeUnit.SECONDS));
            pushCancel(A, "token-" + A, request("ops", null));
            Api.SettleRequest s = settleOf(A);
            assertEquals(Api.ReportedOutcome.REPORTED_SUCCESS, s.getOutcome());
            Seen a = seen.poll(5, TimeUnit.SECONDS);
            assertTrue(a.interruptedAtStart(), "interrupted");
            assertEquals(CancelReason.CANCEL_REQUESTED, a.reason());
            assertEquals("cancelled by ops: no reason given", a.request().orElseThrow().toString());
        }
    }

    @Test
    @DisplayName("a WorkCancel for another claim of the task, or for a task not running here, is ignored")
    void other_claims_and_unknown_tasks_are_ignored() throws Exception {
        BlockingQueue<Seen> seen = new LinkedBlockingQueue<>();
        CountDownLatch started = new CountDownLatch(1);
        CountDownLatch cancels = new CountDownLatch(1);
        try (RdqClient client = client();
                Worker w = grpcWorker(client)
                        .handler("stream.q", "h", (Envelope e) -> {
                            started.countDown();
                            assertTrue(cancels.await(30, TimeUnit.SECONDS));
                            barrier();
                            boolean interrupted = sleepUntilInterrupted(Duration.ofMillis(300));
                            seen.add(Seen.now(interrupted));
                        })
                        .start()) {
            assertEquals(WorkerTransport.GRPC, w.transport());
            pushTask(A, "h");
            assertTrue(started.await(30, TimeUnit.SECONDS));
            pushCancel(A, "token-of-an-earlier-claim", request("ops", "stale"));
            pushCancel(C, "token-" + C, request("ops", "not here"));
            // Not a valid request (an empty by): ignored as well, the stream goes on.
            pushCancel(C, "token-" + C, EnvelopeOuterClass.CancelRequest.newBuilder().setAt("never"));
            cancels.countDown();
            assertEquals(Api.ReportedOutcome.REPORTED_SUCCESS, settleOf(A).getOutcome());
            assertEquals(new Seen(A, false, null, Optional.empty(), false), seen.poll(5, TimeUnit.SECONDS));
        }
    }

    @Test
    @DisplayName("a task cancelled before its handler starts is not handed to the handler and fails as rdq.Cancelled")
    void cancelled_before_start() throws Exception {
        List<String> ran = new java.util.concurrent.CopyOnWriteArrayList<>();
        CountDownLatch started = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        try (RdqClient client = client();
                Worker w = grpcWorker(client).concurrency(1).virtualThreads(false)
                        .handler("stream.q", "h", (Envelope e) -> {
                            ran.add(e.id());
                            started.countDown();
                            assertTrue(release.await(30, TimeUnit.SECONDS));
                            barrier();
                        })
                        .start()) {
            assertEquals(WorkerTransport.GRPC, w.transport());
            pushTask(A, "h");
            assertTrue(started.await(30, TimeUnit.SECONDS));
            pushTask(B, "h");   // waits for the one handler thread
            pushCancel(B, "token-" + B, request("ops", "too late anyway"));
            release.countDown();
            assertEquals(Api.ReportedOutcome.REPORTED_SUCCESS, settleOf(A).getOutcome());
            Api.SettleRequest b = settleOf(B);
            assertEquals(Api.ReportedOutcome.REPORTED_PERMANENT_FAILURE, b.getOutcome());
            assertEquals("rdq.Cancelled", b.getError().getType());
            assertEquals("cancelled by ops: too late anyway", b.getError().getMessage());
            assertEquals(List.of(A), ran);
        }
    }

    @Test
    @DisplayName("an extension's cancel_requested flag stops the handler: who asked from the ack's envelope, else the task, else unknown")
    void extension_flag() throws Exception {
        EnvelopeOuterClass.Envelope withRequest = WorkStreamTest.envelope(A, "h", "{}")
                .setCancelRequested(request("from-ack", "m")).build();
        extendResults.put(A, Api.SettleItemResult.newBuilder().setId(A).setCancelRequested(true)
                .setEnvelope(withRequest).build());
        extendResults.put(B, Api.SettleItemResult.newBuilder().setId(B).setCancelRequested(true).build());
        tasks.put(B, WorkStreamTest.envelope(B, "h", "{}").setCancelRequested(request("from-get", null)).build());
        extendResults.put(C, Api.SettleItemResult.newBuilder().setId(C).setCancelRequested(true).build());
        Map<String, Seen> seen = new ConcurrentHashMap<>();
        try (RdqClient client = client();
                Worker w = grpcWorker(client).leaseMs(300).concurrency(3)
                        .handler("stream.q", "h", (Envelope e) -> {
                            boolean interrupted = sleepUntilInterrupted(Duration.ofSeconds(30));
                            seen.put(e.id(), Seen.now(interrupted));
                            throw new IllegalStateException("gave up");
                        })
                        .start()) {
            assertEquals(WorkerTransport.GRPC, w.transport());
            pushTask(A, "h");
            pushTask(B, "h");
            pushTask(C, "h");
            Map<String, String> by = Map.of(A, "from-ack", B, "from-get", C, GrpcTaskSource.UNKNOWN_CANCELLER);
            for (String id : List.of(A, B, C)) {
                Api.SettleRequest s = settleOf(id);
                assertEquals("rdq.Cancelled", s.getError().getType(), id);
                assertTrue(s.getError().getMessage().startsWith("cancelled by " + by.get(id)), s.getError().getMessage());
                assertTrue(seen.get(id).interruptedAtStart(), id);
                assertEquals(CancelReason.CANCEL_REQUESTED, seen.get(id).reason());
                assertEquals(by.get(id), seen.get(id).request().orElseThrow().by());
            }
            assertEquals("cancelled by from-ack: m", settleOfMessage(A, seen));
        }
    }

    private static String settleOfMessage(String id, Map<String, Seen> seen) {
        return seen.get(id).request().orElseThrow().toString();
    }

    @Test
    @DisplayName("shutdown is never taken for a cancel, nor a cancel for shutdown")
    void shutdown_and_cancel_apart() throws Exception {
        Map<String, Seen> seen = new ConcurrentHashMap<>();
        CountDownLatch bothStarted = new CountDownLatch(2);
        CountDownLatch cancelSeen = new CountDownLatch(1);
        try (RdqClient client = client()) {
            Worker w = grpcWorker(client).concurrency(2)
                    .handler("stream.q", "h", (Envelope e) -> {
                        bothStarted.countDown();
                        boolean interrupted = sleepUntilInterrupted(Duration.ofSeconds(30));
                        seen.put(e.id(), Seen.now(interrupted));
                        if (e.id().equals(B)) {
                            cancelSeen.countDown();
                            // Still stopping when the worker begins to shut down.
                            Thread.sleep(300);
                        }
                        throw new InterruptedException("stopped");
                    })
                    .start();
            pushTask(A, "h");
            pushTask(B, "h");
            assertTrue(bothStarted.await(30, TimeUnit.SECONDS));
            pushCancel(B, "token-" + B, request("ops", "stop B"));
            assertTrue(cancelSeen.await(30, TimeUnit.SECONDS));
            w.shutdown(Duration.ofMillis(600));

            Api.SettleRequest a = settleOf(A);
            Api.SettleRequest b = settleOf(B);
            assertEquals(Api.ReportedOutcome.REPORTED_RELEASE, a.getOutcome(), "shut down: handed back");
            assertEquals(new Seen(A, true, CancelReason.SHUTDOWN, Optional.empty(), true), seen.get(A));
            assertEquals(Api.ReportedOutcome.REPORTED_PERMANENT_FAILURE, b.getOutcome(), "cancelled: not handed back");
            assertEquals("rdq.Cancelled", b.getError().getType());
            assertEquals(CancelReason.CANCEL_REQUESTED, seen.get(B).reason());
        }
    }

    // ------------------------------------------------------------------
    // HTTP: the envelope a lease extension answers

    /** A scripted rdq HTTP API: one claim of one task, lease extensions, settles. */
    static final class ScriptedHttp implements Transport {
        final String claimed;
        final BlockingQueue<JsonObject> settles = new LinkedBlockingQueue<>();
        final AtomicInteger extensions = new AtomicInteger();
        /** From this extension on (1-based), the answer carries the cancel request. */
        final int cancelFrom;
        final String cancelRequested;
        volatile boolean handedOut;

        ScriptedHttp(String envelope, int cancelFrom, String cancelRequested) {
            this.claimed = envelope;
            this.cancelFrom = cancelFrom;
            this.cancelRequested = cancelRequested;
        }

        @Override
        public Response send(Request r) throws IOException {
            String path = r.uri().getPath();
            if (path.endsWith("/claim")) {
                if (handedOut) {
                    return ok("{\"tasks\":[]}");
                }
                handedOut = true;
                return ok("{\"tasks\":[{\"id\":\"" + A + "\",\"lease_token\":\"tok\",\"envelope\":" + claimed + "}]}");
            }
            if (path.equals("/v1/tasks/" + A + "/lease")) {
                int n = extensions.incrementAndGet();
                return ok(n >= cancelFrom ? claimed.substring(0, claimed.length() - 1) + ",\"cancel_requested\":"
                        + cancelRequested + "}" : claimed);
            }
            if (path.equals("/v1/settle")) {
                JsonObject body;
                try {
                    body = (JsonObject) Json.parse(r.body());
                } catch (dev.rdq.json.JsonSyntaxException e) {
                    throw new IOException(e);
                }
                StringBuilder results = new StringBuilder();
                for (JsonValue v : ((JsonArray) body.get("settles").orElseThrow()).items()) {
                    settles.add((JsonObject) v);
                    results.append(results.length() == 0 ? "" : ",").append("{\"id\":\"")
                            .append(((JsonObject) v).string("id").orElseThrow()).append("\",\"status\":200}");
                }
                return ok("{\"results\":[" + results + "]}");
            }
            return new Response(404, "{\"code\":\"NOT_FOUND\",\"detail\":\"no route\"}".getBytes(StandardCharsets.UTF_8));
        }

        private static Response ok(String body) {
            return new Response(200, body.getBytes(StandardCharsets.UTF_8));
        }

        @Override
        public StreamedResponse open(Request r) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void close() {}
    }

    /** An IN_FLIGHT task under a lease of 300 ms (the worker extends it every 100 ms). */
    static String inFlight(String handlerRef) {
        return "{\"envelope_version\":1,\"id\":\"" + A + "\",\"queue\":\"http.q\",\"handler_ref\":\"" + handlerRef + "\","
                + "\"payload\":\"e30=\",\"payload_content_type\":\"application/json\",\"status\":\"IN_FLIGHT\","
                + "\"attempt_count\":1,\"claim_count\":1,\"lease_expires_at\":\"2026-07-20T14:03:22.417Z\","
                + "\"created_at\":\"2026-07-20T14:03:22.117Z\",\"attempts\":[{\"attempt_no\":1,"
                + "\"started_at\":\"2026-07-20T14:03:22.117Z\",\"finished_at\":null,\"outcome\":null,\"error\":null}]}";
    }

    @Test
    @DisplayName("HTTP: an extension answering cancel_requested interrupts the handler once; its failure is rdq.Cancelled")
    void http_extension_cancels() throws Exception {
        ScriptedHttp http = new ScriptedHttp(inFlight("h"), 3,
                "{\"at\":\"" + ASKED_AT + "\",\"by\":\"ops@example.com\",\"message\":\"customer withdrew\"}");
        BlockingQueue<Seen> seen = new LinkedBlockingQueue<>();
        AtomicInteger interrupts = new AtomicInteger();
        try (RdqClient client = RdqClient.builder("http://rdq.invalid").transport(http).build();
                Worker w = Worker.builder(client).transport(WorkerTransport.HTTP).pollInterval(Duration.ofMillis(20))
                        .handler("http.q", "h", (Envelope e) -> {
                            if (sleepUntilInterrupted(Duration.ofSeconds(30))) {
                                interrupts.incrementAndGet();
                            }
                            Seen first = Seen.now(true);
                            // Later extensions still say so: no second interrupt.
                            if (sleepUntilInterrupted(Duration.ofMillis(400))) {
                                interrupts.incrementAndGet();
                            }
                            seen.add(first);
                            throw new java.io.UncheckedIOException(new IOException("socket closed"));
                        })
                        .start()) {
            assertEquals(WorkerTransport.HTTP, w.transport());
            JsonObject s = http.settles.poll(30, TimeUnit.SECONDS);
            assertNotNull(s, "no settle");
            assertEquals(1, interrupts.get());
            assertTrue(http.extensions.get() >= 4, "extended on: " + http.extensions.get());
            Seen a = seen.poll(5, TimeUnit.SECONDS);
            assertEquals(CancelReason.CANCEL_REQUESTED, a.reason());
            assertEquals("ops@example.com", a.request().orElseThrow().by());
            assertEquals("PERMANENT_FAILURE", s.string("outcome").orElseThrow());
            JsonObject error = (JsonObject) s.get("error").orElseThrow();
            assertEquals("rdq.Cancelled", error.string("type").orElseThrow());
            assertEquals("cancelled by ops@example.com: customer withdrew", error.string("message").orElseThrow());
            assertTrue(error.string("stack").orElseThrow().contains("socket closed"));
        }
    }

    @Test
    @DisplayName("HTTP: a success after the cancel is reported as a success")
    void http_success_after_cancel() throws Exception {
        ScriptedHttp http = new ScriptedHttp(inFlight("h"), 1, "{\"at\":\"" + ASKED_AT + "\",\"by\":\"ops\"}");
        BlockingQueue<Seen> seen = new LinkedBlockingQueue<>();
        try (RdqClient client = RdqClient.builder("http://rdq.invalid").transport(http).build();
                Worker w = Worker.builder(client).transport(WorkerTransport.HTTP).pollInterval(Duration.ofMillis(20))
                        .handler("http.q", "h", (Envelope e) -> seen.add(Seen.now(sleepUntilInterrupted(Duration.ofSeconds(30)))))
                        .start()) {
            assertEquals(WorkerTransport.HTTP, w.transport());
            JsonObject s = http.settles.poll(30, TimeUnit.SECONDS);
            assertNotNull(s, "no settle");
            assertEquals("SUCCESS", s.string("outcome").orElseThrow());
            assertNull(s.get("error").orElse(null));
            Seen a = seen.poll(5, TimeUnit.SECONDS);
            assertTrue(a.interruptedAtStart());
            assertEquals("cancelled by ops: no reason given", a.request().orElseThrow().toString());
        }
    }
}
