package dev.rdq.worker;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.client.Schedule;
import dev.rdq.client.ScheduleOwner;
import dev.rdq.client.ScheduleState;
import dev.rdq.client.Settle;
import dev.rdq.client.SettleOutcome;
import dev.rdq.client.SettleResult;
import dev.rdq.client.TraceContext;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.ErrorInfo;
import dev.rdq.envelope.Names;
import dev.rdq.envelope.Status;
import dev.rdq.worker.Routes.QueueRoutes;
import dev.rdq.worker.Routes.Route;
import java.lang.reflect.Method;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A pull worker over {@code rdq serve}: takes tasks, runs their handlers
 * concurrently, settles their outcomes, extends leases while handlers run,
 * cancels handlers past their timeout, and shuts down gracefully.
 *
 * <p>Tasks come from a {@link TaskSource}: the gRPC Work stream by default
 * ({@link GrpcTaskSource}: tasks pushed while credits allow, settles and
 * extensions acknowledged on the same stream), or HTTP claims and batch
 * settles ({@link HttpTaskSource}), chosen by {@link WorkerTransport}.
 *
 * <p>Threads: handlers on virtual threads when the JDK has them (21+,
 * detected at run time) or else on a fixed pool of {@code concurrency}
 * platform threads; one keeper thread for leases and timeouts; the source's
 * own. A handler that throws anything — an {@link Error} such as {@code
 * StackOverflowError} included — is a failure of that task, never of the
 * worker.
 *
 * <p>Every way a running handler is stopped (its timeout, its lost lease,
 * shutdown, a cancel asked through the API) is a {@link CancelReason}:
 * {@link TaskContext#isCancelled()} turns true and the handler's thread is
 * interrupted, once.
 *
 * <p>While a handler runs, {@link TraceContext#current()} on its thread is
 * the task's {@code traceparent} header (when well formed), so submits made
 * from the handler with a client of default options continue the task's trace.
 *
 * <p>Schedules declared with {@link Builder#schedule(Schedule)} are put, owned
 * by code, when the worker starts; those code put once and declares no more
 * are reported ({@link #undeclaredSchedules()}), never deleted. The worker
 * does not fire schedules: every {@code rdq serve} node does.
 */
public final class Worker implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.rdq.worker");
    /** What a cancelled handler that ignores its interrupt gets before the worker lets go of its task. */
    private static final long IGNORED_INTERRUPT_NANOS = TimeUnit.SECONDS.toNanos(2);

    private final RdqClient client;
    private final Map<String, QueueRoutes> queues;
    final int concurrency;
    final int claimBatch;
    final int claimers;
    final int settleBatch;
    final int settlers;
    final int streams;
    final Duration pollInterval;
    final Long leaseMs;
    private final Duration shutdownGrace;
    private final DeadLetterListener deadLetterListener;
    private final boolean virtualThreads;
    private final WorkerTransport transport;
    private final List<Schedule> schedules;
    private volatile List<String> undeclared = List.of();

    final Semaphore slots;
    private final Map<String, RunningTask> running = new ConcurrentHashMap<>();
    final AtomicInteger active = new AtomicInteger();
    private final List<TaskSource> sources = new ArrayList<>();
    private GrpcChannel channel;
    /** One connection per Work stream: the server works each HTTP/2 connection's frames in turn. */
    private final List<GrpcChannel> channels = new ArrayList<>();
    private WorkerTransport activeTransport;
    private Thread keeper;
    private ExecutorService handlers;
    private boolean usingVirtualThreads;
    private volatile boolean accepting;
    private volatile boolean forced;
    private final AtomicBoolean started = new AtomicBoolean();
    private final AtomicBoolean closed = new AtomicBoolean();

    private Worker(Builder b) {
        this.client = b.client;
        Map<String, QueueRoutes> q = new LinkedHashMap<>();
        b.routes.forEach((queue, r) -> q.put(queue, r.build(b)));
        this.queues = q;
        this.concurrency = b.concurrency;
        this.claimBatch = b.claimBatch;
        this.claimers = b.claimers;
        this.settleBatch = b.settleBatch;
        this.settlers = b.settlers;
        this.streams = Math.min(b.streams, b.concurrency);
        this.pollInterval = b.pollInterval;
        this.leaseMs = b.leaseMs;
        this.shutdownGrace = b.shutdownGrace;
        this.deadLetterListener = b.deadLetterListener;
        this.virtualThreads = b.virtualThreads;
        this.transport = b.transport;
        this.schedules = List.copyOf(b.schedules.values());
        this.slots = new Semaphore(concurrency);
    }

    /** A builder for a worker using {@code client}. */
    public static Builder builder(RdqClient client) {
        return new Builder(client);
    }

    /**
     * Starts taking tasks. A worker starts once. With {@link WorkerTransport#AUTO}
     * it first asks the server over gRPC and uses HTTP when no gRPC answers
     * there but HTTP does.
     *
     * <p>Before it takes any task, a worker with {@linkplain
     * Builder#schedule(Schedule) declared schedules} puts each of them, owned by
     * code, in the order declared: the first the server refuses (or cannot be
     * put: {@code CONNECTION_FAILED}, {@code TIMEOUT}, …) fails {@code start()}
     * with that {@link RdqException} ({@code INVALID_CRON}, {@code
     * UNKNOWN_TIME_ZONE}, …), and the worker takes no task; those put before
     * it stay stored. It then lists the stored schedules and keeps the names
     * of those owned by code that it does not declare ({@link
     * #undeclaredSchedules()}).
     */
    public Worker start() {
        if (!started.compareAndSet(false, true)) {
            throw new IllegalStateException("the worker was already started");
        }
        if (!schedules.isEmpty()) {
            try {
                declareSchedules();
            } catch (RuntimeException e) {
                // Nothing was started: there is nothing to shut down.
                closed.set(true);
                throw e;
            }
        }
        handlers = virtualThreads ? newVirtualThreadExecutor() : null;
        usingVirtualThreads = handlers != null;
        if (handlers == null) {
            handlers = Executors.newFixedThreadPool(concurrency, daemon("rdq-handler"));
        }
        activeTransport = resolveTransport();
        accepting = true;
        List<String> names = List.copyOf(queues.keySet());
        if (activeTransport == WorkerTransport.GRPC) {
            for (int i = 0; i < streams; i++) {
                int credits = concurrency / streams + (i < concurrency % streams ? 1 : 0);
                GrpcChannel c = i == 0 ? channel : GrpcChannel.open(client);
                channels.add(c);
                sources.add(new GrpcTaskSource(this, c, names, credits, deadLetterListener != null));
            }
        } else {
            sources.add(new HttpTaskSource(this, client, names, deadLetterListener != null));
        }
        keeper = daemon("rdq-keeper").newThread(this::keepLoop);
        keeper.start();
        for (TaskSource s : sources) {
            s.start(this::accept);
        }
        return this;
    }

    /**
     * Puts the declared schedules, owned by code, then records the schedules
     * code put once that none of them names: reported, never deleted (an
     * operator's {@code rdq schedule delete NAME} does that).
     */
    private void declareSchedules() {
        Set<String> names = new TreeSet<>();
        for (Schedule s : schedules) {
            boolean created;
            try {
                created = client.putSchedule(s, ScheduleOwner.CODE).created();
            } catch (RdqException e) {
                LOG.log(System.Logger.Level.ERROR, "cannot store the declared schedule " + s.name() + ": "
                        + e.getMessage() + "; the worker does not start");
                throw e;
            }
            names.add(s.name());
            LOG.log(System.Logger.Level.INFO, "schedule " + s.name() + (created ? " declared (new)" : " declared"));
        }
        List<ScheduleState> stored;
        try {
            stored = client.listSchedules();
        } catch (RdqException e) {
            LOG.log(System.Logger.Level.WARNING,
                    "cannot list schedules to find those no longer declared: " + e.getMessage(), e);
            return;
        }
        List<String> gone = new ArrayList<>();
        for (ScheduleState s : stored) {
            if (s.owner() == ScheduleOwner.CODE && !names.contains(s.name())) {
                gone.add(s.name());
                LOG.log(System.Logger.Level.WARNING, "schedule " + s.name() + " was put by code and is declared no"
                        + " more; it still fires: delete it with `rdq schedule delete " + s.name()
                        + "` if it should stop");
            }
        }
        undeclared = List.copyOf(gone);
    }

    /**
     * The schedules put by code (by this or another program) that this worker
     * does not declare, by name: they keep firing until deleted ({@code rdq
     * schedule delete NAME}, or {@link RdqClient#deleteSchedule}). Known once
     * {@link #start()} has returned; empty before, and for a worker that
     * declares no schedule. Only schedules the client may read are seen.
     */
    public List<String> undeclaredSchedules() {
        return undeclared;
    }

    private WorkerTransport resolveTransport() {
        if (transport == WorkerTransport.HTTP) {
            return WorkerTransport.HTTP;
        }
        channel = GrpcChannel.open(client);
        if (transport == WorkerTransport.GRPC || channel.answers()) {
            return WorkerTransport.GRPC;
        }
        if (httpAnswers()) {
            LOG.log(System.Logger.Level.INFO, client.baseUrl() + " answers no gRPC: the worker uses HTTP");
            channel.close();
            channel = null;
            return WorkerTransport.HTTP;
        }
        // Neither answers yet (the server is starting or down): the stream keeps trying.
        return WorkerTransport.GRPC;
    }

    private boolean httpAnswers() {
        try {
            client.capabilities();
            return true;
        } catch (RdqException e) {
            return e.httpStatus() > 0;
        }
    }

    /** How this worker reaches the server: {@link WorkerTransport#GRPC} or {@link WorkerTransport#HTTP} once started. */
    public WorkerTransport transport() {
        return activeTransport != null ? activeTransport : transport;
    }

    /** True when handlers run on virtual threads (JDK 21+ and not disabled). */
    public boolean usesVirtualThreads() {
        return usingVirtualThreads;
    }

    /** Tasks taken and not yet finished: handlers running, or about to. */
    public int inFlight() {
        return running.size();
    }

    /** Graceful shutdown with the configured grace ({@link Builder#shutdownGrace(Duration)}). */
    @Override
    public void close() {
        shutdown(shutdownGrace);
    }

    /**
     * Stops taking tasks; waits up to {@code grace} for running handlers to
     * finish and settle; then cancels those still running and hands their
     * tasks back (RELEASE); sends every pending settle; stops its threads.
     */
    public void shutdown(Duration grace) {
        if (!closed.compareAndSet(false, true) || !started.get()) {
            return;
        }
        long deadline = System.nanoTime() + grace.toNanos();
        accepting = false;
        for (TaskSource s : sources) {
            s.stopClaiming();
        }
        waitForHandlers(deadline);
        if (active.get() > 0) {
            forced = true;
            for (RunningTask r : running.values()) {
                r.cancel(CancelReason.SHUTDOWN);
            }
            // Cancelled handlers unwind and release their tasks themselves;
            // those that ignore the interrupt are released from here.
            waitForHandlers(System.nanoTime() + IGNORED_INTERRUPT_NANOS);
            for (RunningTask r : running.values()) {
                if (r.finished.compareAndSet(false, true)) {
                    r.task.source.settle(r.task, Settle.release(r.task.id, r.task.leaseToken));
                }
            }
        }
        keeper.interrupt();
        joinQuietly(keeper);
        for (TaskSource s : sources) {
            s.close();
        }
        for (GrpcChannel c : channels) {
            c.close();
        }
        handlers.shutdownNow();
    }

    private void waitForHandlers(long deadline) {
        while (active.get() > 0 && System.nanoTime() < deadline) {
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    // ------------------------------------------------------------------
    // Running

    /** Takes a task from a source; false when the worker is stopping. */
    private boolean accept(Leased task) {
        if (!accepting) {
            return false;
        }
        QueueRoutes q = queues.get(task.queue);
        Route<?, ?> route = q == null ? null : q.routeFor(task.handlerRef);
        RunningTask r = new RunningTask(task, q, route, route == null ? null : route.timeout);
        boolean slot = task.source instanceof HttpTaskSource || slots.tryAcquire();
        active.incrementAndGet();
        // Known from now on, so a cancel asked before the handler starts is not missed.
        running.put(task.id, r);
        try {
            handlers.execute(() -> run(r, slot));
            return true;
        } catch (RuntimeException e) {
            running.remove(task.id, r);
            active.decrementAndGet();
            if (slot) {
                slots.release();
            }
            return false;
        }
    }

    private void run(RunningTask r, boolean holdsSlot) {
        try {
            if (forced) {
                if (r.finished.compareAndSet(false, true)) {
                    r.task.source.settle(r.task, Settle.release(r.task.id, r.task.leaseToken));
                }
                return;
            }
            r.startedAt = System.nanoTime();
            TaskContext.set(new TaskContext(r));
            // The task's trace context for the handler (and the mapper), so
            // its submits continue the task's trace; restored afterwards.
            TraceContext.Scope trace = TraceContext.open(r.task.traceparent);
            try {
                Outcome o = r.route == null ? unknownHandler(r) : call(r, r.route);
                if (o != null && r.finished.compareAndSet(false, true)) {
                    r.task.source.settle(r.task, toSettle(r.task.id, r.task.leaseToken, o));
                }
            } finally {
                trace.close();
                TaskContext.clear();
            }
        } finally {
            running.remove(r.task.id, r);
            if (holdsSlot) {
                slots.release();
            }
            active.decrementAndGet();
        }
    }

    private Outcome unknownHandler(RunningTask r) {
        running.remove(r.task.id, r);
        return Outcome.permanent(new UnknownHandlerException(r.task.queue, r.task.handlerRef));
    }

    /**
     * Reads the handler's argument, calls it, and decides the outcome; null
     * when nothing is to be settled from here (the lease is gone, or the task
     * was released or settled by the keeper).
     */
    private <T, R> Outcome call(RunningTask r, Route<T, R> route) {
        T arg;
        try {
            arg = route.reader.read(r.task);
        } catch (Exception e) {
            running.remove(r.task.id, r);
            return Outcome.permanent(new PayloadDecodeException(route.target, e));
        }
        R ret = null;
        Throwable err = null;
        if (!r.handlerStarting()) {
            // Cancelled before its handler started: it is not called.
            err = new java.util.concurrent.CancellationException("cancelled before the handler started");
        } else {
            try {
                ret = route.handler.handle(arg);
            } catch (Throwable t) {
                err = t;
            } finally {
                r.handlerEnded();
            }
        }
        running.remove(r.task.id, r);
        if (r.isSettledElsewhere()) {
            // Settled by the handler's own transaction: no settle, but a Work
            // stream's credit comes back now that the handler is done.
            r.task.source.abandoned(r.task);
            return null;
        }
        CancelReason cancelled = r.cancelReason();
        if (cancelled == CancelReason.LEASE_LOST) {
            // The lease is gone (reaped, reclaimed): a settle would be refused.
            if (r.finished.compareAndSet(false, true)) {
                r.task.source.abandoned(r.task);
            }
            return null;
        }
        if (cancelled == CancelReason.SHUTDOWN && err != null) {
            if (r.finished.compareAndSet(false, true)) {
                r.task.source.settle(r.task, Settle.release(r.task.id, r.task.leaseToken));
            }
            return null;
        }
        if (cancelled == CancelReason.TIMEOUT) {
            err = new HandlerTimeoutException(route.timeout, err);
            ret = null;
        }
        if (cancelled == CancelReason.CANCEL_REQUESTED && err != null) {
            // Stopped because a cancel was asked: whatever it threw, the mapper is not asked.
            return cancelledOutcome(r.cancelRequest(), err);
        }
        // The mapper runs with the task's context still set.
        Outcome o = r.queue.ladder.decide(route.mapper, ret, err);
        // A success after a cancel counts; any other outcome ends the task DEAD (CANCELLED) on the server.
        return cancelled == CancelReason.CANCEL_REQUESTED && o.kind() != Outcome.Kind.SUCCESS
                ? cancelledOutcome(r.cancelRequest(), err) : o;
    }

    /** The error type of a handler stopped because a cancel was asked of its task. */
    static final String CANCELLED_ERROR_TYPE = "rdq.Cancelled";

    /**
     * The failure reported for a handler stopped by a cancel: type {@value
     * #CANCELLED_ERROR_TYPE}, message {@code cancelled by <by>: <message>},
     * the stack of what the handler threw (if anything).
     */
    static Outcome cancelledOutcome(dev.rdq.envelope.CancelRequest request, Throwable thrown) {
        String message = request != null ? request.toString() : "cancelled";
        ErrorInfo e = ErrorInfo.of(CANCELLED_ERROR_TYPE, message);
        if (thrown != null) {
            e = e.withStack(Outcome.errorOf(thrown).stack().orElse(null));
        }
        return Outcome.permanent(e);
    }

    /**
     * A source says a cancel was asked of the task {@code id} it handed out
     * with {@code leaseToken}: its handler is stopped (or, not started yet,
     * never called). A task this worker no longer runs, or runs under
     * another claim, is left alone.
     */
    void cancelRequested(String id, String leaseToken, dev.rdq.envelope.CancelRequest request) {
        RunningTask r = running.get(id);
        if (r != null && r.task.leaseToken.equals(leaseToken) && !r.finished.get()) {
            r.requestCancel(request);
        }
    }

    static Settle toSettle(String id, String leaseToken, Outcome o) {
        ErrorInfo e = o.error().orElse(null);
        switch (o.kind()) {
            case SUCCESS:
                return Settle.success(id, leaseToken);
            case RETRYABLE_FAILURE:
                return new Settle(id, leaseToken, SettleOutcome.RETRYABLE_FAILURE, e, null);
            case PERMANENT_FAILURE:
                return new Settle(id, leaseToken, SettleOutcome.PERMANENT_FAILURE, e, null);
            case UNCLASSIFIED_FAILURE:
                return new Settle(id, leaseToken, SettleOutcome.FAILURE, e, null);
            case DEFER:
            default:
                return Settle.defer(id, leaseToken, o.deferDelay().orElse(Duration.ZERO).toMillis(),
                        o.throttle().orElse(null));
        }
    }

    /** A settle's answer, from a source: the dead-letter listener, and a log line for refusals. */
    void settled(SettleResult r) {
        if (r.ok()) {
            Envelope env = r.envelope();
            if (env != null && env.status() == Status.DEAD && deadLetterListener != null) {
                try {
                    deadLetterListener.onDeadLetter(env);
                } catch (RuntimeException | Error e) {
                    LOG.log(System.Logger.Level.WARNING, "dead-letter listener failed", e);
                }
            }
            return;
        }
        // UNSUPPORTED (a throttle on a store without flow limits) is a
        // deployment problem, not a race: say so louder.
        System.Logger.Level level = "UNSUPPORTED".equals(r.code()) ? System.Logger.Level.WARNING
                : System.Logger.Level.DEBUG;
        LOG.log(level, "settle of " + r.id() + " refused: " + r.code() + (r.detail() == null ? "" : ": " + r.detail()));
    }

    // ------------------------------------------------------------------
    // Leases and timeouts

    private void keepLoop() {
        while (!Thread.currentThread().isInterrupted()) {
            long now = System.nanoTime();
            for (RunningTask r : running.values()) {
                if (r.pastTimeout(now)) {
                    r.cancel(CancelReason.TIMEOUT);
                    CancelReason why = r.cancelReason();
                    if ((why == CancelReason.TIMEOUT || why == CancelReason.CANCEL_REQUESTED)
                            && now - r.startedAt >= r.timeout.toNanos() + IGNORED_INTERRUPT_NANOS
                            && r.finished.compareAndSet(false, true)) {
                        // The handler ignores its interrupt past its timeout: its task
                        // is failed now, and whatever it returns later is dropped.
                        HandlerTimeoutException late = new HandlerTimeoutException(r.timeout, null);
                        Outcome o = why == CancelReason.TIMEOUT ? r.queue.ladder.decide(null, null, late)
                                : cancelledOutcome(r.cancelRequest(), late);
                        r.task.source.settle(r.task, toSettle(r.task.id, r.task.leaseToken, o));
                    }
                }
                if (now >= r.renewAt && !r.leaseLost() && !r.finished.get()) {
                    r.extendNow(r.task.leaseMs);
                }
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /** The lease of a claim: its deadline minus its open attempt's start (both server times). */
    static long leaseOf(Envelope env) {
        Instant expires = env.leaseExpiresAt().orElse(null);
        Instant started = env.openAttempt().map(a -> a.startedAt()).orElse(null);
        if (expires == null || started == null) {
            return 30_000;
        }
        return Math.max(1, expires.toEpochMilli() - started.toEpochMilli());
    }

    // ------------------------------------------------------------------
    // Threads

    private static ExecutorService newVirtualThreadExecutor() {
        try {
            Method m = Executors.class.getMethod("newVirtualThreadPerTaskExecutor");
            return (ExecutorService) m.invoke(null);
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            return null;
        }
    }

    static ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    static void joinQuietly(Thread t) {
        try {
            t.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Options of a worker. */
    public static final class Builder {
        private final RdqClient client;
        private final Map<String, RoutesBuilder> routes = new LinkedHashMap<>();
        private final List<Class<? extends Throwable>> retryable = new ArrayList<>();
        private final List<Class<? extends Throwable>> nonRetryable = new ArrayList<>();
        private int concurrency = 64;
        private int claimBatch = 64;
        private int claimers = 1;
        private int settleBatch = 512;
        private int settlers = 2;
        private int streams = 1;
        private Duration pollInterval = Duration.ofMillis(200);
        private Long leaseMs;
        private Duration shutdownGrace = Duration.ofSeconds(30);
        private DeadLetterListener deadLetterListener;
        private boolean virtualThreads = true;
        private WorkerTransport transport = WorkerTransport.AUTO;
        private ObjectMapper objectMapper;
        private final Map<String, Schedule> schedules = new LinkedHashMap<>();

        private Builder(RdqClient client) {
            this.client = Objects.requireNonNull(client, "client");
        }

        private RoutesBuilder routes(String queue) {
            Names.validateQueueName(queue);
            return routes.computeIfAbsent(queue, RoutesBuilder::new);
        }

        private Builder route(String queue, String handlerRef, Route<?, ?> route) {
            Names.validateHandlerRef(handlerRef);
            routes(queue).byRef.put(handlerRef, route);
            return this;
        }

        private ObjectMapper objectMapper() {
            if (objectMapper == null) {
                objectMapper = Routes.defaultObjectMapper();
            }
            return objectMapper;
        }

        /** Runs tasks of {@code handlerRef} on {@code queue} with {@code handler}, which takes the whole envelope. */
        public Builder handler(String queue, String handlerRef, Handler<Envelope> handler) {
            Objects.requireNonNull(handler, "handler");
            return route(queue, handlerRef, Route.ofEnvelope(voidHandler(handler), null, handler.timeout()));
        }

        /** Runs every task of {@code queue} whose handler_ref has no handler of its own. */
        public Builder handler(String queue, Handler<Envelope> handler) {
            Objects.requireNonNull(handler, "handler");
            routes(queue).fallback = Route.ofEnvelope(voidHandler(handler), null, handler.timeout());
            return this;
        }

        /**
         * Runs tasks of {@code handlerRef} on {@code queue} with {@code handler},
         * which takes the payload as a {@code type}: {@code byte[]} (as stored),
         * {@code String} (UTF-8), a {@link dev.rdq.json.JsonValue} (the SDK's JSON
         * tree), {@link Envelope} (the whole task), or any other class, bound from
         * the JSON payload by Jackson ({@link #objectMapper}). A payload that does
         * not decode is a permanent failure ({@link PayloadDecodeException}).
         */
        public <T> Builder handler(String queue, String handlerRef, Class<T> type, Handler<T> handler) {
            Objects.requireNonNull(handler, "handler");
            return route(queue, handlerRef, typed(type, voidHandler(handler), null, handler.timeout()));
        }

        /** Runs tasks of {@code handlerRef} with {@code handler}, its payload decoded by {@code decoder}. */
        public <T> Builder handler(String queue, String handlerRef, PayloadDecoder<T> decoder, Handler<T> handler) {
            Objects.requireNonNull(decoder, "decoder");
            Objects.requireNonNull(handler, "handler");
            return route(queue, handlerRef, Route.ofPayload("the decoder's type", decoder, voidHandler(handler), null,
                    handler.timeout()));
        }

        /** Runs tasks of {@code handlerRef} on {@code queue} with a handler of the envelope that returns a value. */
        public <R> Builder valueHandler(String queue, String handlerRef, ValueHandler<Envelope, R> handler) {
            Objects.requireNonNull(handler, "handler");
            return route(queue, handlerRef, Route.ofEnvelope(handler, null, handler.timeout()));
        }

        /**
         * Runs tasks of {@code handlerRef} with a handler of the payload as a
         * {@code type} (as {@link #handler(String, String, Class, Handler)}) that
         * returns an {@code R}, decided by {@code mapper} (null: the queue's
         * mapper, if any, else the ladder).
         */
        public <T, R> Builder valueHandler(String queue, String handlerRef, Class<T> type, ValueHandler<T, R> handler,
                OutcomeMapper<? super R> mapper) {
            Objects.requireNonNull(handler, "handler");
            return route(queue, handlerRef, typed(type, handler, mapper, handler.timeout()));
        }

        /**
         * Makes {@code mapper} authoritative for every call on {@code queue}
         * whose handler has no mapper of its own.
         */
        public Builder outcomeMapper(String queue, OutcomeMapper<Object> mapper) {
            routes(queue).mapper = Objects.requireNonNull(mapper, "mapper");
            return this;
        }

        /**
         * Cancels a call of {@code handlerRef}'s handler on {@code queue} that
         * runs longer than {@code timeout} (over the handler's own {@link
         * Handler#timeout()}): its thread is interrupted, and the call is a
         * failure of type {@link HandlerTimeoutException}. Register the
         * handler first.
         */
        public Builder timeout(String queue, String handlerRef, Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("a handler timeout is positive");
            }
            RoutesBuilder r = routes(queue);
            Route<?, ?> route = r.byRef.get(handlerRef);
            if (route == null) {
                throw new IllegalStateException("no handler " + handlerRef + " on " + queue + " to give a timeout");
            }
            r.byRef.put(handlerRef, route.withTimeout(timeout));
            return this;
        }

        /** The Jackson mapper that binds payloads to handler classes (default: Jackson's defaults, unknown members ignored). */
        public Builder objectMapper(ObjectMapper mapper) {
            this.objectMapper = Objects.requireNonNull(mapper, "mapper");
            return this;
        }

        @SuppressWarnings("unchecked")
        private <T, R> Route<T, R> typed(Class<T> type, ValueHandler<T, R> handler, OutcomeMapper<? super R> mapper,
                Duration timeout) {
            Objects.requireNonNull(type, "type");
            if (type == Envelope.class) {
                // T is Envelope here.
                return (Route<T, R>) (Route<?, ?>) Route.ofEnvelope((ValueHandler<Envelope, R>) handler, mapper, timeout);
            }
            return Route.ofPayload(type.getName(), Routes.decoderFor(type, objectMapper()), handler, mapper, timeout);
        }

        private static <T> ValueHandler<T, Object> voidHandler(Handler<T> handler) {
            return arg -> {
                handler.handle(arg);
                return null;
            };
        }

        /** Exceptions (and their subclasses, anywhere in the cause chain) that are retryable. */
        @SafeVarargs
        public final Builder retryableErrors(Class<? extends Throwable>... classes) {
            for (Class<? extends Throwable> c : classes) {
                retryable.add(Objects.requireNonNull(c));
            }
            return this;
        }

        /** Exceptions (and subclasses, anywhere in the cause chain) that go straight to the DLQ; wins over retryable. */
        @SafeVarargs
        public final Builder nonRetryableErrors(Class<? extends Throwable>... classes) {
            for (Class<? extends Throwable> c : classes) {
                nonRetryable.add(Objects.requireNonNull(c));
            }
            return this;
        }

        /** Handlers running at once (default 64); on the Work stream, the credits. */
        public Builder concurrency(int n) {
            this.concurrency = Math.min(10_000, positive(n, "concurrency"));
            return this;
        }

        /** How the worker reaches the server (default {@link WorkerTransport#AUTO}: gRPC, else HTTP). */
        public Builder transport(WorkerTransport transport) {
            this.transport = Objects.requireNonNull(transport, "transport");
            return this;
        }

        /** gRPC: Work streams, each on a connection of its own, sharing the credits (default 1). */
        public Builder streams(int n) {
            this.streams = positive(n, "streams");
            return this;
        }

        /** HTTP: most tasks per claim (default 64, at most 1000). */
        public Builder claimBatch(int n) {
            this.claimBatch = Math.min(1000, positive(n, "claimBatch"));
            return this;
        }

        /** HTTP: claim loops per queue (default 1); more overlap claim round trips. */
        public Builder claimers(int n) {
            this.claimers = positive(n, "claimers");
            return this;
        }

        /** Most settles per batch (default 512, at most 1000): one {@code POST /v1/settle} or one {@code WorkSettle}. */
        public Builder settleBatch(int n) {
            this.settleBatch = Math.min(1000, positive(n, "settleBatch"));
            return this;
        }

        /** HTTP: settle requests in flight at once (default 2). */
        public Builder settlers(int n) {
            this.settlers = positive(n, "settlers");
            return this;
        }

        /** HTTP: longest idle wait between claims of an empty queue (default 200 ms). */
        public Builder pollInterval(Duration d) {
            this.pollInterval = Objects.requireNonNull(d);
            return this;
        }

        /** Lease of each task; default the queue's {@code lease_ms}. */
        public Builder leaseMs(long ms) {
            this.leaseMs = ms;
            return this;
        }

        /** Time running handlers get at {@link Worker#close()} (default 30 s). */
        public Builder shutdownGrace(Duration d) {
            this.shutdownGrace = Objects.requireNonNull(d);
            return this;
        }

        /** Called for every task a settle of this worker dead-lettered. */
        public Builder onDeadLetter(DeadLetterListener listener) {
            this.deadLetterListener = listener;
            return this;
        }

        /**
         * Declares a schedule in code ({@code docs/schedules.md}): when the
         * worker starts, before it takes any task, the schedule is put by
         * name, owned by code, replacing the stored definition (its cursor
         * and counters stay); a definition the server refuses fails {@link
         * Worker#start()} with the rule's code. A schedule code put once and
         * declares no more keeps firing and is reported ({@link
         * Worker#undeclaredSchedules()}, and a warning), never deleted. Two
         * declarations of one name are refused here with {@code
         * INVALID_ARGUMENT} naming {@code name}. The schedules fire on the
         * {@code rdq serve} nodes, not in the worker.
         */
        public Builder schedule(Schedule schedule) {
            Objects.requireNonNull(schedule, "schedule");
            if (schedules.putIfAbsent(schedule.name(), schedule) != null) {
                throw new RdqException("INVALID_ARGUMENT", "name", "schedule " + schedule.name() + " is declared twice");
            }
            return this;
        }

        /** Use virtual threads when the JDK has them (default true). */
        public Builder virtualThreads(boolean enabled) {
            this.virtualThreads = enabled;
            return this;
        }

        public Worker build() {
            if (routes.isEmpty()) {
                throw new IllegalStateException("register at least one handler");
            }
            return new Worker(this);
        }

        /** Builds and starts the worker. */
        public Worker start() {
            return build().start();
        }

        private static int positive(int n, String what) {
            if (n < 1) {
                throw new IllegalArgumentException(what + " must be at least 1");
            }
            return n;
        }
    }

    private static final class RoutesBuilder {
        final String queue;
        final Map<String, Route<?, ?>> byRef = new HashMap<>();
        Route<?, ?> fallback;
        OutcomeMapper<Object> mapper;

        RoutesBuilder(String queue) {
            this.queue = queue;
        }

        QueueRoutes build(Builder b) {
            return new QueueRoutes(queue, Map.copyOf(byRef), fallback, new OutcomeLadder(mapper, b.retryable, b.nonRetryable));
        }
    }
}
