package dev.rdq.client;

import dev.rdq.RdqException;
import dev.rdq.UniqueHeldException;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.EnvelopeCodec;
import dev.rdq.envelope.EnvelopeException;
import dev.rdq.envelope.Names;
import dev.rdq.envelope.Timestamps;
import dev.rdq.internal.GrpcChannels;
import dev.rdq.internal.ProtoEnvelopes;
import dev.rdq.json.Json;
import dev.rdq.json.JsonArray;
import dev.rdq.json.JsonNull;
import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonString;
import dev.rdq.json.JsonSyntaxException;
import dev.rdq.json.JsonValue;
import dev.rdq.json.JsonWriter;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.ConnectException;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalDouble;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import rdq.v1.Api;
import rdq.v1.TasksGrpc;

/**
 * A client of {@code rdq serve}'s HTTP API ({@code docs/http-api.md}):
 * submit, read tasks, the pull-worker calls, queues and their flow
 * control, the DLQ, periodic schedules, and the sources the server runs.
 * Submits can go over gRPC instead ({@link Builder#submitProtocol}).
 *
 * <p>Thread-safe and meant to be shared: requests go through a {@link
 * Transport}, by default the JDK's {@code HttpClient} ({@link
 * JdkHttpTransport}; {@code docs/sdk-java.md}, "Transport"). Every failure is an
 * {@link RdqException} carrying the server's stable code ({@code
 * TASK_NOT_FOUND}, {@code LEASE_LOST}, …) or a client-side one ({@link
 * RdqException#TIMEOUT}, {@link RdqException#CONNECTION_FAILED}).
 */
public final class RdqClient implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.rdq.client");

    private final URI base;
    private final Duration requestTimeout;
    private final Transport http;
    private final boolean ownsTransport;
    private final String authorization;
    private final String token;
    private final javax.net.ssl.SSLContext sslContext;
    private final Duration connectTimeout;
    private final Executor asyncExecutor;
    private final Supplier<String> traceParent;
    private final SubmitProtocol submitProtocol;
    /** The gRPC channel of {@link SubmitProtocol#GRPC} submits, opened on the first; null until then. */
    private io.grpc.ManagedChannel grpc;
    private final io.grpc.ClientInterceptor grpcAuth;
    private boolean closed;

    private RdqClient(Builder b) {
        String s = b.baseUrl.toString();
        this.base = URI.create(s.endsWith("/") ? s.substring(0, s.length() - 1) : s);
        String authorization = b.token == null ? null : "Bearer " + b.token;
        this.requestTimeout = b.requestTimeout;
        this.authorization = authorization;
        this.ownsTransport = b.transport == null;
        this.http = b.transport != null ? b.transport : JdkHttpTransport.create(b.connectTimeout, b.sslContext);
        this.token = b.token;
        this.sslContext = b.sslContext;
        this.connectTimeout = b.connectTimeout;
        this.asyncExecutor = b.executor != null ? b.executor : DefaultExecutor.INSTANCE;
        this.traceParent = b.traceParent;
        this.submitProtocol = b.submitProtocol;
        this.grpcAuth = GrpcChannels.authorization(b.token);
    }

    /** Virtual threads when the JDK has them (21+), else a cached pool of daemon threads. */
    private static final class DefaultExecutor {
        static final Executor INSTANCE = create();

        private static Executor create() {
            try {
                java.lang.reflect.Method m = java.util.concurrent.Executors.class.getMethod("newVirtualThreadPerTaskExecutor");
                return (Executor) m.invoke(null);
            } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
                java.util.concurrent.atomic.AtomicInteger n = new java.util.concurrent.atomic.AtomicInteger();
                return java.util.concurrent.Executors.newCachedThreadPool(r -> {
                    Thread t = new Thread(r, "rdq-client-" + n.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                });
            }
        }
    }

    /** A builder for a client of the server at {@code baseUrl} (e.g. {@code http://127.0.0.1:7480}). */
    public static Builder builder(URI baseUrl) {
        return new Builder(baseUrl);
    }

    /** A builder for a client of the server at {@code baseUrl}. */
    public static Builder builder(String baseUrl) {
        return new Builder(URI.create(baseUrl));
    }

    public URI baseUrl() {
        return base;
    }

    /** The bearer token, or null (for the gRPC channel a worker opens to the same server). */
    public String token() {
        return token;
    }

    /** The TLS context given to the builder, or null for the JDK's default. */
    public javax.net.ssl.SSLContext sslContext() {
        return sslContext;
    }

    /** The connect timeout given to the builder (default 5 s). */
    public Duration connectTimeout() {
        return connectTimeout;
    }

    /** How this client submits ({@link Builder#submitProtocol}; default {@link SubmitProtocol#HTTP}). */
    public SubmitProtocol submitProtocol() {
        return submitProtocol;
    }

    /**
     * Closes the transport the client built itself (a transport passed to
     * the builder stays open) and the gRPC channel of its submits.
     */
    @Override
    public void close() {
        io.grpc.ManagedChannel channel;
        synchronized (this) {
            closed = true;
            channel = grpc;
            grpc = null;
        }
        if (channel != null) {
            GrpcChannels.shutdown(channel);
        }
        if (ownsTransport) {
            http.close();
        }
    }

    // ------------------------------------------------------------------
    // Tasks

    /**
     * Submits one task; answers the new envelope (or the original one, for a
     * repeated idempotency key; or a unique key's holder that took this
     * submit's payload, with {@link UniqueConflict#REPLACE} or {@link
     * UniqueConflict#DEBOUNCE}; or the holder itself, with {@link
     * UniqueConflict#EXISTING}). A unique key another task holds is refused
     * with {@link UniqueHeldException}. The current trace context (the
     * builder's {@link Builder#traceParent(Supplier)}, else {@link
     * TraceContext#current()}) is sent as the {@code traceparent} request
     * header (gRPC: metadata) unless the request sets its own {@code
     * traceparent} header.
     */
    public Envelope submit(SubmitRequest request) {
        if (submitProtocol == SubmitProtocol.GRPC) {
            TasksGrpc.TasksBlockingStub stub = tasks(traceParentFor(request));
            Api.SubmitResponse resp;
            try {
                resp = stub.submit(request.toProto());
            } catch (RuntimeException e) {
                throw grpcError(e);
            }
            return protoEnvelope(resp.getEnvelope());
        }
        return envelopeOf(send(post("/v1/tasks", request.toJson(), traceParentFor(request))));
    }

    /**
     * Submits many tasks in one request ({@code POST /v1/tasks/batch}, gRPC
     * {@code Tasks/SubmitBatch}; at most 1000, stored in one store call
     * where the store can) and answers one {@link SubmitResult} per request,
     * in order. Items are independent and decided in order: an item refused
     * (its {@link SubmitResult#error()}: a {@link UniqueHeldException} when
     * an earlier item or task holds its unique key) leaves the others
     * stored. A failure of the whole call (unreachable, unauthorised, too
     * many items) is thrown. The trace context is read once, on the calling
     * thread, for every item without a {@code traceparent} header of its own.
     */
    public List<SubmitResult> submitBatch(List<SubmitRequest> requests) {
        String traceparent = traceParentFor(null);
        if (submitProtocol == SubmitProtocol.GRPC) {
            Api.SubmitBatchRequest.Builder b = Api.SubmitBatchRequest.newBuilder();
            for (SubmitRequest r : requests) {
                Api.SubmitRequest item = r.toProto();
                // SubmitBatch reads no traceparent metadata: each item carries it, as HTTP's batch applies the header.
                if (traceparent != null && !r.headers().containsKey(TraceContext.HEADER)) {
                    item = item.toBuilder().putHeaders(TraceContext.HEADER, traceparent).build();
                }
                b.addTasks(item);
            }
            TasksGrpc.TasksBlockingStub stub = tasks(null);
            Api.SubmitBatchResponse resp;
            try {
                resp = stub.submitBatch(b.build());
            } catch (RuntimeException e) {
                throw grpcError(e);
            }
            List<SubmitResult> out = new ArrayList<>(resp.getResultsCount());
            for (Api.SubmitItemResult r : resp.getResultsList()) {
                if (r.hasProblem()) {
                    RdqException err = GrpcChannels.problem(r.getProblem(), null);
                    out.add(new SubmitResult(err.httpStatus(), null, err));
                } else {
                    out.add(new SubmitResult(r.getCreated() ? 201 : 200, protoEnvelope(r.getEnvelope()), null));
                }
            }
            return resultsFor(requests, out);
        }
        List<byte[]> bodies = new ArrayList<>(requests.size());
        int size = 16;
        for (SubmitRequest r : requests) {
            byte[] json = r.toJson();
            bodies.add(json);
            size += json.length + 1;
        }
        JsonWriter w = new JsonWriter(size).startObject();
        w.key("tasks").startArray();
        for (byte[] json : bodies) {
            w.rawValue(json);
        }
        w.endArray().endObject();
        JsonObject body = object(send(post("/v1/tasks/batch", w.toByteArray(), traceparent)));
        List<SubmitResult> out = new ArrayList<>(requests.size());
        for (JsonValue v : array(body, "results").items()) {
            if (!(v instanceof JsonObject r)) {
                throw unexpected("expected an object in \"results\"");
            }
            int status = r.integer("status").orElse(0L).intValue();
            Optional<JsonValue> env = r.get("envelope");
            if (status >= 200 && status < 300 && env.isPresent()) {
                out.add(new SubmitResult(status, envelopeOf(env.get()), null));
                continue;
            }
            String code = r.string("code").orElseThrow(() -> unexpected("a refused batch item without a code"));
            String detail = r.string("detail").orElse("");
            RdqException err = UniqueHeldException.CODE.equals(code) && r.string("holder").isPresent()
                    ? new UniqueHeldException(r.string("holder").get(), r.string("hold").orElse(null), detail, status, null)
                    : new RdqException(code, r.string("field").orElse(null), detail, status, null);
            out.add(new SubmitResult(status, null, err));
        }
        return resultsFor(requests, out);
    }

    /** The results, one per request: else the server answered something else. */
    private static List<SubmitResult> resultsFor(List<SubmitRequest> requests, List<SubmitResult> results) {
        if (results.size() != requests.size()) {
            throw unexpected(results.size() + " results for " + requests.size() + " submits");
        }
        return List.copyOf(results);
    }

    /**
     * Submits one task without blocking the caller, through the transport's
     * {@link Transport#sendAsync} (the JDK client's own asynchronous send by
     * default; a transport without one runs a blocking send on the client's
     * executor). The trace context is read on the calling thread.
     */
    public CompletableFuture<Envelope> submitAsync(SubmitRequest request) {
        if (submitProtocol == SubmitProtocol.GRPC) {
            return submitAsyncGrpc(request);
        }
        Transport.Request call = post("/v1/tasks", request.toJson(), traceParentFor(request));
        CompletableFuture<Transport.Response> sent;
        try {
            sent = http.sendAsync(call, asyncExecutor);
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        }
        return sent.handle((resp, err) -> {
            if (err != null) {
                Throwable c = err instanceof java.util.concurrent.CompletionException && err.getCause() != null
                        ? err.getCause() : err;
                if (c instanceof RdqException r) {
                    throw r;
                }
                if (c instanceof IOException io) {
                    throw transport(io);
                }
                if (c instanceof InterruptedException) {
                    throw new RdqException(RdqException.INTERRUPTED, null, "interrupted while waiting for the server", 0, c);
                }
                throw new RdqException(RdqException.CONNECTION_FAILED, null, String.valueOf(c), 0, c);
            }
            int status = resp.status();
            if (status >= 200 && status < 300) {
                return envelopeOf(resp.body());
            }
            throw problem(status, resp.body());
        });
    }

    private CompletableFuture<Envelope> submitAsyncGrpc(SubmitRequest request) {
        CompletableFuture<Envelope> out = new CompletableFuture<>();
        TasksGrpc.TasksStub stub;
        try {
            stub = TasksGrpc.newStub(channel()).withInterceptors(interceptors(traceParentFor(request)))
                    .withDeadlineAfter(requestTimeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (RuntimeException e) {
            // A closed client, a base URL gRPC cannot reach: as thrown.
            return CompletableFuture.failedFuture(e);
        }
        try {
            stub.submit(request.toProto(), new io.grpc.stub.StreamObserver<Api.SubmitResponse>() {
                @Override
                public void onNext(Api.SubmitResponse resp) {
                    try {
                        out.complete(protoEnvelope(resp.getEnvelope()));
                    } catch (RuntimeException e) {
                        out.completeExceptionally(e);
                    }
                }

                @Override
                public void onError(Throwable t) {
                    out.completeExceptionally(grpcError(t));
                }

                @Override
                public void onCompleted() {
                    if (!out.isDone()) {
                        out.completeExceptionally(unexpected("a Submit call answered nothing"));
                    }
                }
            });
        } catch (RuntimeException e) {
            out.completeExceptionally(grpcError(e));
        }
        return out;
    }

    /** A blocking {@code Tasks} stub on the submit channel, with the token, the traceparent and the request timeout. */
    private TasksGrpc.TasksBlockingStub tasks(String traceparent) {
        return TasksGrpc.newBlockingStub(channel()).withInterceptors(interceptors(traceparent))
                .withDeadlineAfter(requestTimeout.toMillis(), TimeUnit.MILLISECONDS);
    }

    private io.grpc.ClientInterceptor[] interceptors(String traceparent) {
        if (traceparent == null) {
            return new io.grpc.ClientInterceptor[] {grpcAuth};
        }
        io.grpc.Metadata md = new io.grpc.Metadata();
        md.put(io.grpc.Metadata.Key.of(TraceContext.HEADER, io.grpc.Metadata.ASCII_STRING_MARSHALLER), traceparent);
        return new io.grpc.ClientInterceptor[] {grpcAuth, io.grpc.stub.MetadataUtils.newAttachHeadersInterceptor(md)};
    }

    /** The gRPC channel of the submits, opened on first use. */
    private synchronized io.grpc.ManagedChannel channel() {
        if (closed) {
            throw new IllegalStateException("the client is closed");
        }
        if (grpc == null) {
            grpc = GrpcChannels.open(base, sslContext, connectTimeout, "a gRPC submit");
        }
        return grpc;
    }

    private static RdqException grpcError(Throwable t) {
        return t instanceof RdqException r ? r : GrpcChannels.error(t);
    }

    /** A gRPC answer's envelope ({@code UNEXPECTED_RESPONSE} when it is not a valid one). */
    private static Envelope protoEnvelope(rdq.v1.EnvelopeOuterClass.Envelope e) {
        return ProtoEnvelopes.toEnvelope(e);
    }

    /**
     * The traceparent to send with {@code request}: none when the request
     * has its own {@code traceparent} header (it wins, as on the server);
     * else the builder's supplier's answer when it is well formed ({@link
     * TraceContext#parse}), else {@link TraceContext#current()}. A supplier
     * that throws or answers a malformed value counts as no answer: trace
     * propagation never fails a submit and never sends a malformed value.
     */
    private String traceParentFor(SubmitRequest request) {
        if (request != null && request.headers().containsKey(TraceContext.HEADER)) {
            return null;
        }
        if (traceParent != null) {
            String tp = null;
            try {
                tp = traceParent.get();
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, "the traceParent supplier failed; using TraceContext.current()", e);
            }
            Optional<String> parsed = TraceContext.parse(tp);
            if (parsed.isPresent()) {
                return parsed.get();
            }
            if (tp != null) {
                LOG.log(System.Logger.Level.DEBUG, "not sending the supplier's malformed traceparent");
            }
        }
        return TraceContext.current().orElse(null);
    }

    /**
     * Submits many tasks as single submits (see {@link #submitBatch} for one
     * request), at most {@code maxInFlight} at once, and answers the
     * envelopes in the order of {@code requests}. The first failure is thrown
     * once every submit has finished; tasks submitted before it stay submitted
     * (use idempotency keys to make a retry of the whole batch safe). The
     * trace context is read on the calling thread for every request.
     */
    public List<Envelope> submitAll(List<SubmitRequest> requests, int maxInFlight) {
        if (maxInFlight < 1) {
            throw new IllegalArgumentException("maxInFlight must be at least 1");
        }
        Semaphore slots = new Semaphore(maxInFlight);
        List<CompletableFuture<Envelope>> futures = new ArrayList<>(requests.size());
        try {
            for (SubmitRequest r : requests) {
                slots.acquire();
                futures.add(submitAsync(r).whenComplete((e, t) -> slots.release()));
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RdqException(RdqException.INTERRUPTED, null, "interrupted while submitting", 0, e);
        }
        List<Envelope> out = new ArrayList<>(requests.size());
        RdqException first = null;
        for (CompletableFuture<Envelope> f : futures) {
            try {
                out.add(join(f));
            } catch (RdqException e) {
                if (first == null) {
                    first = e;
                }
                out.add(null);
            }
        }
        if (first != null) {
            throw first;
        }
        return out;
    }

    /** The task with its attempt history ({@code TASK_NOT_FOUND} if there is none). */
    public Envelope get(String id) {
        return envelopeOf(send(httpGet("/v1/tasks/" + pathSegment(id))));
    }

    // ------------------------------------------------------------------
    // Pull workers

    /** Claims up to {@code max} due tasks (at most 1000) under a lease; {@code leaseMs} null means the queue's. */
    public List<ClaimedTask> claim(String queue, int max, Long leaseMs) {
        Names.validateQueueName(queue);
        JsonWriter w = new JsonWriter(48).startObject();
        w.key("max").number(max);
        if (leaseMs != null) {
            w.key("lease_ms").number(leaseMs);
        }
        w.endObject();
        JsonObject body = object(send(post("/v1/queues/" + queue + "/claim", w.toByteArray())));
        List<ClaimedTask> tasks = new ArrayList<>();
        for (JsonValue v : array(body, "tasks").items()) {
            JsonObject t = (JsonObject) v;
            tasks.add(new ClaimedTask(str(t, "id"), str(t, "lease_token"),
                    EnvelopeCodec.fromJson(t.get("envelope").orElseThrow(() -> unexpected("claim without envelope")))));
        }
        return tasks;
    }

    /** Settles many tasks in one call (at most 1000); one result per item, in order. */
    public List<SettleResult> settle(List<Settle> settles) {
        return settle(settles, true);
    }

    /**
     * Settles a batch; with {@code withEnvelopes} false the server answers
     * each settled item without its envelope ({@link SettleResult#envelope()}
     * is null), which spares both sides an envelope per task when only the
     * statuses matter.
     */
    public List<SettleResult> settle(List<Settle> settles, boolean withEnvelopes) {
        JsonWriter w = new JsonWriter(64 + settles.size() * 96).startObject();
        w.key("settles").startArray();
        for (Settle s : settles) {
            s.write(w);
        }
        w.endArray();
        if (!withEnvelopes) {
            w.key("envelopes").bool(false);
        }
        w.endObject();
        JsonObject body = object(send(post("/v1/settle", w.toByteArray())));
        List<SettleResult> out = new ArrayList<>(settles.size());
        for (JsonValue v : array(body, "results").items()) {
            JsonObject r = (JsonObject) v;
            int status = r.integer("status").orElse(0L).intValue();
            Envelope env = r.get("envelope").map(EnvelopeCodec::fromJson).orElse(null);
            out.add(new SettleResult(r.string("id").orElse(""), status, env, r.string("code").orElse(null),
                    r.string("detail").orElse(null)));
        }
        return out;
    }

    /** Settles one task; {@code LEASE_LOST} when the lease is no longer held. */
    public Envelope settleOne(Settle settle) {
        SettleResult r = settle(List.of(settle)).get(0);
        if (!r.ok()) {
            throw new RdqException(r.code(), null, r.detail(), r.status(), null);
        }
        return r.envelope();
    }

    /** Makes the lease end {@code extendMs} from now; {@code LEASE_LOST} when it is no longer held. */
    public Envelope extendLease(String id, String leaseToken, long extendMs) {
        JsonWriter w = new JsonWriter(96).startObject();
        w.key("lease_token").string(leaseToken);
        w.key("extend_ms").number(extendMs);
        w.endObject();
        return envelopeOf(send(post("/v1/tasks/" + pathSegment(id) + "/lease", w.toByteArray())));
    }

    // ------------------------------------------------------------------
    // Queues and the DLQ (admin scope)

    /** Every queue with its counts. */
    public List<QueueCounts> queues() {
        JsonObject body = object(send(httpGet("/v1/queues")));
        List<QueueCounts> out = new ArrayList<>();
        for (JsonValue v : array(body, "queues").items()) {
            JsonObject q = (JsonObject) v;
            out.add(new QueueCounts(str(q, "queue"), q.integer("pending").orElse(0L), q.integer("in_flight").orElse(0L),
                    q.integer("succeeded").orElse(0L), q.integer("dead").orElse(0L)));
        }
        return out;
    }

    /** What the store behind the server can do ({@code GET /v1/capabilities}): capability name to whether it has it. */
    public java.util.Map<String, Boolean> capabilities() {
        JsonObject body = object(send(httpGet("/v1/capabilities")));
        java.util.Map<String, Boolean> out = new java.util.TreeMap<>();
        if (body.get("capabilities").orElse(null) instanceof JsonObject caps) {
            caps.members().forEach((k, v) -> out.put(k, v instanceof dev.rdq.json.JsonBoolean b && b.value()));
        }
        return out;
    }

    /** The queue's live policy with defaults filled in. */
    public JsonObject queueConfig(String queue) {
        Names.validateQueueName(queue);
        return object(send(httpGet("/v1/queues/" + queue + "/config")));
    }

    /** Replaces the policy fields named in {@code patch}; answers the resulting policy. */
    public JsonObject updateQueueConfig(String queue, JsonObject patch) {
        Names.validateQueueName(queue);
        return object(send(call("PUT", "/v1/queues/" + queue + "/config", Json.write(patch), null)));
    }

    /**
     * The queue's flow-control state ({@code GET /v1/queues/{queue}/flow}, any
     * scope on the queue): its flow limits and how they stand now. A store
     * without flow limits answers {@code UNSUPPORTED}.
     */
    public QueueFlow queueFlow(String queue) {
        Names.validateQueueName(queue);
        return flowOf(object(send(httpGet("/v1/queues/" + queue + "/flow"))));
    }

    /**
     * Throttles flow key {@code flowKey} of the queue, or the whole queue when
     * {@code flowKey} is null, for {@code duration} ({@code POST
     * /v1/queues/{queue}/throttle}, admin): nothing it covers is claimed
     * before then, on every worker and node, and a later throttle is never
     * shortened by an earlier end. {@code duration} is sent in whole
     * milliseconds, 1 ms to 7 days ({@code INVALID_FIELD} naming {@code
     * for_ms} otherwise). A bad flow key is refused before any request with
     * {@code INVALID_FIELD} naming {@code flow_key}. Answers the queue's flow
     * state after the throttle.
     */
    public QueueFlow throttle(String queue, String flowKey, Duration duration) {
        Objects.requireNonNull(duration, "duration");
        long ms;
        try {
            ms = duration.toMillis();
        } catch (ArithmeticException e) {
            ms = Long.MAX_VALUE; // refused by the server as too long
        }
        long forMs = ms;
        return throttle(queue, flowKey, w -> w.key("for_ms").number(forMs));
    }

    /**
     * {@link #throttle(String, String, Duration)} until {@code until} (in the
     * future, within 7 days: {@code INVALID_FIELD} naming {@code until}
     * otherwise).
     */
    public QueueFlow throttle(String queue, String flowKey, Instant until) {
        Objects.requireNonNull(until, "until");
        return throttle(queue, flowKey, w -> w.key("until").string(Timestamps.format(until)));
    }

    private QueueFlow throttle(String queue, String flowKey, java.util.function.Consumer<JsonWriter> when) {
        Names.validateQueueName(queue);
        if (flowKey != null) {
            Names.validateFlowKey(flowKey);
        }
        JsonWriter w = new JsonWriter(96).startObject();
        if (flowKey != null) {
            w.key("flow_key").string(flowKey);
        }
        when.accept(w);
        w.endObject();
        return flowOf(object(send(post("/v1/queues/" + queue + "/throttle", w.toByteArray()))));
    }

    /** One page of the queue's DLQ; {@code cursor} and {@code errorTypeGlob} may be null. */
    public DeadPage listDead(String queue, int limit, String cursor, String errorTypeGlob) {
        return listDead(queue, limit, cursor, errorTypeGlob, null);
    }

    /**
     * One page of the queue's DLQ, of tasks dead for {@code reason} (a code
     * of {@link dev.rdq.envelope.DeadReason}, or {@code UNRECORDED}; null:
     * any); {@code cursor} and {@code errorTypeGlob} may be null.
     */
    public DeadPage listDead(String queue, int limit, String cursor, String errorTypeGlob, String reason) {
        Names.validateQueueName(queue);
        StringBuilder q = new StringBuilder("/v1/queues/").append(queue).append("/dead?limit=").append(limit);
        query(q, "cursor", cursor);
        query(q, "error_type", errorTypeGlob);
        query(q, "reason", reason);
        return pageOf(object(send(httpGet(q.toString()))));
    }

    /**
     * One page of the queue's tasks, newest first: in {@code status}
     * ({@code PENDING}, {@code IN_FLIGHT}, {@code SUCCEEDED}, {@code DEAD};
     * null: any), of {@code handlerRef} and with the header
     * {@code "KEY=VALUE"} {@code header} (null: any).
     */
    public DeadPage listTasks(String queue, String status, String handlerRef, String header, int limit, String cursor) {
        Names.validateQueueName(queue);
        StringBuilder q = new StringBuilder("/v1/queues/").append(queue).append("/tasks?limit=").append(limit);
        query(q, "status", status);
        query(q, "handler_ref", handlerRef);
        query(q, "header", header);
        query(q, "cursor", cursor);
        return pageOf(object(send(httpGet(q.toString()))));
    }

    /** The queue's dead tasks counted by reason, most first (reason → count, in that order). */
    public java.util.Map<String, Long> deadReasons(String queue) {
        Names.validateQueueName(queue);
        JsonObject body = object(send(httpGet("/v1/queues/" + queue + "/dead/reasons")));
        java.util.Map<String, Long> out = new java.util.LinkedHashMap<>();
        for (JsonValue v : array(body, "reasons").items()) {
            JsonObject r = (JsonObject) v;
            out.put(r.string("reason").orElse(""), r.integer("count").orElse(0L));
        }
        return out;
    }

    /**
     * Cancels tasks of the queue: a PENDING one becomes DEAD with reason
     * {@code CANCELLED} and keeps its history (a redrive brings it back); a
     * running one is asked to stop ({@link CancelResult#running()}): its
     * worker is told, and it ends DEAD with reason {@code CANCELLED} unless
     * its handler succeeds first. {@link CancelFilter#pendingOnly(boolean)}
     * leaves running tasks alone. One id alone that cannot be cancelled is an
     * {@link RdqException} with code {@code TASK_NOT_FOUND} or {@code
     * INVALID_TRANSITION}; a store that cannot cancel (RabbitMQ) answers
     * {@code UNSUPPORTED}.
     */
    public CancelResult cancel(String queue, CancelFilter filter) {
        Names.validateQueueName(queue);
        JsonWriter w = new JsonWriter(128).startObject();
        if (filter.ids() != null) {
            w.key("ids").startArray();
            for (String id : filter.ids()) {
                w.string(id);
            }
            w.endArray();
        }
        if (filter.handlerRef() != null) {
            w.key("handler_ref").string(filter.handlerRef());
        }
        if (!filter.headers().isEmpty()) {
            w.key("headers").startObject();
            for (java.util.Map.Entry<String, String> h : new java.util.TreeMap<>(filter.headers()).entrySet()) {
                w.key(h.getKey()).string(h.getValue());
            }
            w.endObject();
        }
        if (filter.olderThan() != null) {
            w.key("older_than_ms").number(filter.olderThan().toMillis());
        }
        if (filter.limit() != null) {
            w.key("limit").number(filter.limit());
        }
        w.key("dry_run").bool(filter.dryRun());
        if (filter.message() != null) {
            w.key("message").string(filter.message());
        }
        if (filter.pendingOnly()) {
            w.key("pending_only").bool(true);
        }
        w.endObject();
        JsonObject body = object(send(post("/v1/queues/" + queue + "/cancel", w.toByteArray())));
        List<String> cancelled = ids(array(body, "ids"));
        // A server from before running tasks could be cancelled answers no `running`.
        List<String> running = body.get("running").orElse(null) instanceof JsonArray a ? ids(a) : List.of();
        return new CancelResult(body.string("queue").orElse(queue),
                body.get("dry_run").map(v -> v.toString().equals("true")).orElse(filter.dryRun()),
                body.integer("count").orElse((long) cancelled.size()), cancelled, running);
    }

    private static List<String> ids(JsonArray array) {
        List<String> out = new ArrayList<>(array.items().size());
        for (JsonValue v : array.items()) {
            if (!(v instanceof JsonString s)) {
                throw unexpected("a task id that is not a string");
            }
            out.add(s.value());
        }
        return out;
    }

    private static void query(StringBuilder q, String key, String value) {
        if (value != null) {
            q.append('&').append(key).append('=').append(URLEncoder.encode(value, StandardCharsets.UTF_8));
        }
    }

    private static DeadPage pageOf(JsonObject body) {
        List<Envelope> items = new ArrayList<>();
        for (JsonValue v : array(body, "items").items()) {
            items.add(EnvelopeCodec.fromJson(v));
        }
        return new DeadPage(items, body.string("next_cursor"));
    }

    /** One dead task of the queue ({@code TASK_NOT_FOUND} unless it is DEAD in this queue). */
    public Envelope showDead(String queue, String id) {
        Names.validateQueueName(queue);
        return envelopeOf(send(httpGet("/v1/queues/" + queue + "/dead/" + pathSegment(id))));
    }

    /**
     * Redrives dead tasks: those in {@code ids} (or all when null), matching
     * {@code errorTypeGlob} (or any), at most {@code limit} (or all).
     */
    public RedriveResult redrive(String queue, List<String> ids, String errorTypeGlob, Long limit, boolean dryRun) {
        return redrive(queue, ids, errorTypeGlob, null, limit, dryRun);
    }

    /** {@link #redrive(String, List, String, Long, boolean)}, of tasks dead for {@code reason} (null: any). */
    public RedriveResult redrive(String queue, List<String> ids, String errorTypeGlob, String reason, Long limit,
            boolean dryRun) {
        Names.validateQueueName(queue);
        JsonWriter w = new JsonWriter(128).startObject();
        if (ids != null) {
            w.key("ids").startArray();
            for (String id : ids) {
                w.string(id);
            }
            w.endArray();
        }
        if (errorTypeGlob != null) {
            w.key("error_type").string(errorTypeGlob);
        }
        if (reason != null) {
            w.key("reason").string(reason);
        }
        if (limit != null) {
            w.key("limit").number(limit);
        }
        w.key("dry_run").bool(dryRun);
        w.endObject();
        JsonObject body = object(send(post("/v1/queues/" + queue + "/dead/redrive", w.toByteArray())));
        List<String> redriven = new ArrayList<>();
        for (JsonValue v : array(body, "ids").items()) {
            redriven.add(((JsonString) v).value());
        }
        return new RedriveResult(body.string("queue").orElse(queue),
                body.get("dry_run").map(v -> v.toString().equals("true")).orElse(dryRun),
                body.integer("count").orElse((long) redriven.size()), redriven);
    }

    /**
     * Streams the queue's DLQ export (JSONL, one canonical envelope per line,
     * oldest first) into {@code out}; answers the number of bytes copied.
     */
    public long exportDead(String queue, String errorTypeGlob, OutputStream out) {
        Names.validateQueueName(queue);
        String path = "/v1/queues/" + queue + "/dead/export"
                + (errorTypeGlob == null ? "" : "?error_type=" + URLEncoder.encode(errorTypeGlob, StandardCharsets.UTF_8));
        Transport.StreamedResponse resp;
        try {
            resp = http.open(httpGet(path));
        } catch (IOException e) {
            throw transport(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RdqException(RdqException.INTERRUPTED, null, "interrupted", 0, e);
        }
        try (InputStream in = resp.body()) {
            if (resp.status() != 200) {
                throw problem(resp.status(), in.readAllBytes());
            }
            return in.transferTo(out);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The queue's DLQ export, decoded. */
    public List<Envelope> exportDead(String queue, String errorTypeGlob) {
        java.io.ByteArrayOutputStream buf = new java.io.ByteArrayOutputStream();
        exportDead(queue, errorTypeGlob, buf);
        List<Envelope> out = new ArrayList<>();
        byte[] all = buf.toByteArray();
        int start = 0;
        for (int i = 0; i <= all.length; i++) {
            if (i == all.length || all[i] == '\n') {
                if (i > start) {
                    out.add(EnvelopeCodec.decode(java.util.Arrays.copyOfRange(all, start, i)));
                }
                start = i + 1;
            }
        }
        return out;
    }

    /** Deletes every dead task of the queue; answers how many. */
    public long purgeDead(String queue, boolean dryRun) {
        Names.validateQueueName(queue);
        JsonObject body = object(send(call("DELETE", "/v1/queues/" + queue + "/dead?dry_run=" + dryRun, null, null)));
        return body.integer("purged").orElse(0L);
    }

    // ------------------------------------------------------------------
    // Schedules (docs/schedules.md): stored in the store, fired by every
    // rdq serve's scheduler. Reading one needs any scope on its task's
    // queue, changing one admin there.

    /**
     * Creates or replaces the schedule of {@code schedule.name()} ({@code PUT
     * /v1/schedules/{name}}), owned by {@link ScheduleOwner#API}. A
     * replaced schedule keeps its cursor, counters and creation time. A
     * schedule that breaks a rule is refused with its code and field ({@code
     * INVALID_CRON} on {@code spec.cron}, {@code UNKNOWN_TIME_ZONE} on {@code
     * tz}, {@code INVALID_INTERVAL}, {@code INVALID_WINDOW}, a submit's codes
     * on {@code task.…}), and nothing is stored.
     */
    public PutScheduleResult putSchedule(Schedule schedule) {
        return putSchedule(schedule, ScheduleOwner.API);
    }

    /**
     * {@link #putSchedule(Schedule)} as {@code owner}: {@link
     * ScheduleOwner#CODE} for a schedule a program declares at its start (the
     * worker's {@code schedule(…)} puts its declarations so), which marks the
     * stored schedules its code may stop declaring.
     */
    public PutScheduleResult putSchedule(Schedule schedule, ScheduleOwner owner) {
        Objects.requireNonNull(schedule, "schedule");
        Objects.requireNonNull(owner, "owner");
        Transport.Response resp = exchange(call("PUT", "/v1/schedules/" + schedule.name() + "?owner=" + owner.wire(),
                schedule.toJson(), null));
        return new PutScheduleResult(resp.status() == 201, ScheduleState.fromJson(object(resp.body())));
    }

    /** The schedule with its firing state ({@code SCHEDULE_NOT_FOUND} if there is none). */
    public ScheduleState getSchedule(String name) {
        Schedule.checkName(name);
        return ScheduleState.fromJson(object(send(httpGet("/v1/schedules/" + name))));
    }

    /** Every schedule on a queue the caller may read, by name. */
    public List<ScheduleState> listSchedules() {
        JsonObject body = object(send(httpGet("/v1/schedules")));
        List<ScheduleState> out = new ArrayList<>();
        for (JsonValue v : array(body, "schedules").items()) {
            if (!(v instanceof JsonObject o)) {
                throw unexpected("expected an object in \"schedules\"");
            }
            out.add(ScheduleState.fromJson(o));
        }
        return out;
    }

    /** Deletes the schedule ({@code SCHEDULE_NOT_FOUND} if there is none); the tasks it submitted stay. */
    public void deleteSchedule(String name) {
        Schedule.checkName(name);
        send(call("DELETE", "/v1/schedules/" + name, null, null));
    }

    /**
     * Pauses the schedule: it submits nothing, and the due times it passes
     * are skipped as {@code paused}. Answers the schedule.
     */
    public ScheduleState pauseSchedule(String name) {
        Schedule.checkName(name);
        return ScheduleState.fromJson(object(send(post("/v1/schedules/" + name + "/pause", null))));
    }

    /** Resumes a paused schedule from now, without catching up on the pause. Answers the schedule. */
    public ScheduleState resumeSchedule(String name) {
        Schedule.checkName(name);
        return ScheduleState.fromJson(object(send(post("/v1/schedules/" + name + "/resume", null))));
    }

    /**
     * Submits the schedule's task once now, outside its cadence, and answers
     * the new task: it carries the headers {@code rdq.schedule} (the name)
     * and {@code rdq.schedule_manual: true}, no idempotency key, and moves
     * neither the schedule's cursor nor its counters.
     */
    public Envelope runSchedule(String name) {
        Schedule.checkName(name);
        return envelopeOf(send(post("/v1/schedules/" + name + "/run", null)));
    }

    /**
     * The schedule's next {@code count} due times from now (1 to 100), as the
     * scheduler computes them; fewer when the schedule ends. A paused
     * schedule answers them too (they will be skipped unless it is resumed).
     */
    public List<Instant> nextDue(String name, int count) {
        Schedule.checkName(name);
        JsonObject body = object(send(httpGet("/v1/schedules/" + name + "/next?count=" + count)));
        List<Instant> out = new ArrayList<>();
        for (JsonValue v : array(body, "due_ms").items()) {
            if (!(v instanceof JsonNumber n) || !n.isIntegral()) {
                throw unexpected("a due time that is not an integer");
            }
            try {
                out.add(Instant.ofEpochMilli(n.longValueExact()));
            } catch (ArithmeticException e) {
                throw unexpected("a due time out of range: " + n);
            }
        }
        return out;
    }

    // ------------------------------------------------------------------
    // Sources (docs/sources.md): the Kafka topics, NATS JetStream streams and
    // SQS queues the server reads into tasks ([[sources]] in its
    // configuration file). Reading one needs any scope on its queue,
    // resetting its cursors admin there.

    /**
     * Every source the server runs on a queue the caller may read, by name,
     * with its status as this server process knows it ({@code GET
     * /v1/sources}).
     */
    public List<SourceStatus> listSources() {
        JsonObject body = object(send(httpGet("/v1/sources")));
        List<SourceStatus> out = new ArrayList<>();
        for (JsonValue v : array(body, "sources").items()) {
            if (!(v instanceof JsonObject o)) {
                throw unexpected("expected an object in \"sources\"");
            }
            out.add(SourceStatus.fromJson(o));
        }
        return out;
    }

    /**
     * The source with its status and partitions ({@code GET
     * /v1/sources/{name}}): {@code SOURCE_NOT_FOUND} for a name the server
     * does not run, or whose queue the caller may not read. A name outside
     * {@code [a-z0-9._-]{1,120}} is refused before any request ({@code
     * INVALID_ARGUMENT} naming {@code source}).
     */
    public SourceStatus getSource(String name) {
        SourceStatus.checkName(name);
        return SourceStatus.fromJson(object(send(httpGet("/v1/sources/" + name))));
    }

    /**
     * Removes every cursor the store keeps for the source ({@code DELETE
     * /v1/sources/{name}/cursors}, admin on its queue; audited as {@code
     * source.reset}) and answers how many there were: its next start takes
     * its position from the source. Reset a source while no process runs it
     * ({@code docs/sources.md}). A source the server does not run can be
     * reset too (0 when it had none); a store without source cursors
     * (RabbitMQ) answers {@code UNSUPPORTED}.
     */
    public long resetSourceCursors(String name) {
        SourceStatus.checkName(name);
        JsonObject body = object(send(call("DELETE", "/v1/sources/" + name + "/cursors", null, null)));
        return body.integer("deleted").orElseThrow(() -> unexpected("expected an integer \"deleted\""));
    }

    // ------------------------------------------------------------------
    // Transport

    private Transport.Request post(String path, byte[] json) {
        return post(path, json, null);
    }

    private Transport.Request post(String path, byte[] json, String traceparent) {
        return call("POST", path, json, traceparent);
    }

    private Transport.Request httpGet(String path) {
        return call("GET", path, null, null);
    }

    private Transport.Request call(String method, String path, byte[] json, String traceparent) {
        java.util.Map<String, String> h = new java.util.HashMap<>(4);
        h.put("accept", "application/json");
        if (authorization != null) {
            h.put("authorization", authorization);
        }
        if (traceparent != null) {
            h.put("traceparent", traceparent);
        }
        if (json != null) {
            h.put("content-type", "application/json");
        }
        return new Transport.Request(method, URI.create(base + path), h, json, requestTimeout);
    }

    private byte[] send(Transport.Request call) {
        return exchange(call).body();
    }

    /** The answer of a request that succeeded (2xx), with its status; else the server's problem. */
    private Transport.Response exchange(Transport.Request call) {
        Transport.Response resp;
        try {
            resp = http.send(call);
        } catch (IOException e) {
            throw transport(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RdqException(RdqException.INTERRUPTED, null, "interrupted while waiting for the server", 0, e);
        }
        int status = resp.status();
        if (status >= 200 && status < 300) {
            return resp;
        }
        throw problem(status, resp.body());
    }

    /**
     * The server's problem document as an exception with its stable code
     * ({@link UniqueHeldException} for {@code UNIQUE_HELD} with its holder).
     */
    private static RdqException problem(int status, byte[] body) {
        try {
            if (Json.parse(body) instanceof JsonObject p && p.string("code").isPresent()) {
                String code = p.string("code").get();
                String detail = p.string("detail").orElse(p.string("title").orElse(""));
                if (UniqueHeldException.CODE.equals(code) && p.string("holder").isPresent()) {
                    return new UniqueHeldException(p.string("holder").get(), p.string("hold").orElse(null), detail,
                            status, null);
                }
                return new RdqException(code, p.string("field").orElse(null), detail, status, null);
            }
        } catch (JsonSyntaxException e) {
            // Not a problem document: reported below.
        }
        return new RdqException(RdqException.UNEXPECTED_RESPONSE, null,
                "HTTP " + status + ": " + new String(body, StandardCharsets.UTF_8), status, null);
    }

    private static RdqException transport(IOException e) {
        if (Thread.currentThread().isInterrupted()) {
            // On a virtual thread an interrupt closes the socket being read.
            return new RdqException(RdqException.INTERRUPTED, null, "interrupted while waiting for the server", 0, e);
        }
        if (e instanceof SocketTimeoutException) {
            return new RdqException(RdqException.TIMEOUT, null, "no answer within the request timeout: " + e.getMessage(), 0, e);
        }
        if (e instanceof HttpConnectTimeoutException) {
            return new RdqException(RdqException.CONNECTION_FAILED, null, "connect timed out: " + e.getMessage(), 0, e);
        }
        if (e instanceof HttpTimeoutException) {
            return new RdqException(RdqException.TIMEOUT, null, "request timed out: " + e.getMessage(), 0, e);
        }
        if (e instanceof ConnectException) {
            return new RdqException(RdqException.CONNECTION_FAILED, null, "connection refused: " + e.getMessage(), 0, e);
        }
        return new RdqException(RdqException.CONNECTION_FAILED, null, String.valueOf(e.getMessage()), 0, e);
    }

    private static <T> T join(CompletableFuture<T> f) {
        try {
            return f.get();
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof RdqException r) {
                throw r;
            }
            throw new RdqException(RdqException.CONNECTION_FAILED, null, String.valueOf(c), 0, c);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RdqException(RdqException.INTERRUPTED, null, "interrupted", 0, e);
        }
    }

    private static Envelope envelopeOf(byte[] body) {
        try {
            return EnvelopeCodec.decode(body);
        } catch (EnvelopeException e) {
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, e.field().orElse(null),
                    "the server answered an envelope this SDK refuses: " + e.getMessage(), 0, e);
        }
    }

    private static Envelope envelopeOf(JsonValue json) {
        try {
            return EnvelopeCodec.fromJson(json);
        } catch (EnvelopeException e) {
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, e.field().orElse(null),
                    "the server answered an envelope this SDK refuses: " + e.getMessage(), 0, e);
        }
    }

    private static JsonObject object(byte[] body) {
        try {
            if (Json.parse(body) instanceof JsonObject o) {
                return o;
            }
        } catch (JsonSyntaxException e) {
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, null, "not JSON: " + e.getMessage(), 0, e);
        }
        throw unexpected("expected a JSON object");
    }

    /** A flow document ({@code GET …/flow}, {@code POST …/throttle}) as a {@link QueueFlow}. */
    static QueueFlow flowOf(JsonObject o) {
        List<FlowKeyStatus> keys = new ArrayList<>();
        for (JsonValue v : array(o, "keys").items()) {
            if (!(v instanceof JsonObject k)) {
                throw unexpected("expected an object in \"keys\"");
            }
            keys.add(new FlowKeyStatus(str(k, "key"), k.integer("in_flight").orElse(0L), optionalNumber(k, "tokens"),
                    optionalTime(k, "blocked_until")));
        }
        JsonObject limits = o.get("limits").orElse(null) instanceof JsonObject l ? l : JsonObject.EMPTY;
        return new QueueFlow(str(o, "queue"), limits, optionalNumber(o, "tokens"), optionalTime(o, "blocked_until"),
                o.integer("in_flight").orElse(0L), keys, o.integer("throttled_claims").orElse(0L));
    }

    /** A number member, empty when absent or null. */
    private static OptionalDouble optionalNumber(JsonObject o, String key) {
        JsonValue v = o.get(key).orElse(JsonNull.INSTANCE);
        if (v instanceof JsonNumber n) {
            return OptionalDouble.of(n.bigDecimalValue().doubleValue());
        }
        if (v == JsonNull.INSTANCE) {
            return OptionalDouble.empty();
        }
        throw unexpected("expected a number or null \"" + key + "\"");
    }

    /** An RFC 3339 time member, empty when absent or null. */
    private static Optional<Instant> optionalTime(JsonObject o, String key) {
        JsonValue v = o.get(key).orElse(JsonNull.INSTANCE);
        if (v == JsonNull.INSTANCE) {
            return Optional.empty();
        }
        if (v instanceof JsonString s) {
            Instant t = Timestamps.parse(s.value());
            if (t != null) {
                return Optional.of(t);
            }
            try {
                return Optional.of(OffsetDateTime.parse(s.value()).toInstant());
            } catch (DateTimeParseException e) {
                throw unexpected("\"" + key + "\" is not an RFC 3339 time: " + s.value());
            }
        }
        throw unexpected("expected a time or null \"" + key + "\"");
    }

    private static JsonArray array(JsonObject o, String key) {
        if (o.get(key).orElse(null) instanceof JsonArray a) {
            return a;
        }
        throw unexpected("expected an array \"" + key + "\"");
    }

    private static String str(JsonObject o, String key) {
        return o.string(key).orElseThrow(() -> unexpected("expected a string \"" + key + "\""));
    }

    private static RdqException unexpected(String why) {
        return new RdqException(RdqException.UNEXPECTED_RESPONSE, null, why, 0, null);
    }

    private static String pathSegment(String id) {
        return URLEncoder.encode(Objects.requireNonNull(id, "id"), StandardCharsets.UTF_8).replace("+", "%20");
    }

    /** Options of a client. */
    public static final class Builder {
        private final URI baseUrl;
        private String token;
        private Duration requestTimeout = Duration.ofSeconds(30);
        private Duration connectTimeout = Duration.ofSeconds(5);
        private Transport transport;
        private javax.net.ssl.SSLContext sslContext;
        private Executor executor;
        private Supplier<String> traceParent;
        private SubmitProtocol submitProtocol = SubmitProtocol.HTTP;

        private Builder(URI baseUrl) {
            this.baseUrl = Objects.requireNonNull(baseUrl, "baseUrl");
        }

        /** A bearer token (sent as {@code Authorization: Bearer TOKEN}). */
        public Builder token(String token) {
            if (token != null && token.chars().anyMatch(c -> c < 0x21 || c > 0x7e)) {
                throw new IllegalArgumentException("a bearer token is visible ASCII without spaces");
            }
            this.token = token;
            return this;
        }

        /** Longest wait for one answer (default 30 s); then {@link RdqException#TIMEOUT}. */
        public Builder requestTimeout(Duration timeout) {
            this.requestTimeout = Objects.requireNonNull(timeout);
            return this;
        }

        /** Longest wait to connect (default 5 s). */
        public Builder connectTimeout(Duration timeout) {
            this.connectTimeout = Objects.requireNonNull(timeout);
            return this;
        }

        /** The TLS context for an {@code https://} base URL (default: the JDK's default context). */
        public Builder sslContext(javax.net.ssl.SSLContext context) {
            this.sslContext = Objects.requireNonNull(context);
            return this;
        }

        /**
         * Sends every request through {@code transport} instead of the default
         * {@link JdkHttpTransport}; {@link #connectTimeout} and {@link #sslContext}
         * then concern only the worker's gRPC channel. The client does not close
         * a transport given here.
         */
        public Builder transport(Transport transport) {
            this.transport = Objects.requireNonNull(transport, "transport");
            return this;
        }

        /** Sends every request through this {@code java.net.http} client: {@code transport(new JdkHttpTransport(client))}. */
        public Builder httpClient(HttpClient client) {
            return transport(new JdkHttpTransport(client));
        }

        /** Where {@code submitAsync} runs its submits (default: virtual threads, or a cached daemon pool). */
        public Builder executor(Executor executor) {
            this.executor = Objects.requireNonNull(executor);
            return this;
        }

        /**
         * Where submits get the current W3C traceparent, asked on the
         * submitting thread for every submit (single, async, each of {@code
         * submitAll}) whose request has no {@code traceparent} header of its
         * own. When it answers {@code null}, a malformed value or throws,
         * {@link TraceContext#current()} is used, which is also the default
         * without a supplier. Plug OpenTelemetry in here ({@code
         * docs/sdk-java.md}, "Tracing").
         */
        public Builder traceParent(Supplier<String> supplier) {
            this.traceParent = Objects.requireNonNull(supplier, "supplier");
            return this;
        }

        /**
         * How the client submits (default {@link SubmitProtocol#HTTP}):
         * {@link SubmitProtocol#GRPC} sends {@code submit}, {@code
         * submitAsync}, {@code submitAll} and {@code submitBatch} as gRPC
         * {@code Tasks/Submit} and {@code Tasks/SubmitBatch} calls on the
         * same address; every other call stays HTTP.
         */
        public Builder submitProtocol(SubmitProtocol protocol) {
            this.submitProtocol = Objects.requireNonNull(protocol, "protocol");
            return this;
        }

        /** The client. */
        public RdqClient build() {
            return new RdqClient(this);
        }
    }

}
