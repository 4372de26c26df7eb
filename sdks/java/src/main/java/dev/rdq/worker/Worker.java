package dev.rdq.worker;

import dev.rdq.RdqException;
import dev.rdq.client.ClaimedTask;
import dev.rdq.client.RdqClient;
import dev.rdq.client.Settle;
import dev.rdq.client.SettleOutcome;
import dev.rdq.client.SettleResult;
import dev.rdq.client.TraceContext;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.ErrorInfo;
import dev.rdq.envelope.Status;
import java.lang.reflect.Method;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A pull worker over {@code rdq serve}: claims tasks in batches, runs their
 * handlers concurrently, settles outcomes in batches, extends leases while
 * handlers run, and shuts down gracefully.
 *
 * <p>Threads: one claim loop per queue (platform thread), handlers on virtual
 * threads when the JDK has them (21+, detected at run time) or else on a
 * fixed pool of {@code concurrency} platform threads, settler threads sending
 * {@code POST /v1/settle} batches, and one lease keeper. A handler that throws
 * anything — an {@link Error} such as {@code StackOverflowError} included — is
 * a failure of that task, never of the worker.
 *
 * <p>{@link #close()} stops claiming, lets running handlers finish for the
 * shutdown grace, then interrupts the rest and hands their tasks back
 * (outcome RELEASE: due now, no attempt spent).
 *
 * <p>While a handler runs, {@link TraceContext#current()} on its thread is
 * the task's {@code traceparent} header (when well formed), so submits made
 * from the handler with a client of default options continue the task's trace.
 */
public final class Worker implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.rdq.worker");

    private final RdqClient client;
    private final Map<String, QueueRoutes> queues;
    private final int concurrency;
    private final int claimBatch;
    private final int claimers;
    private final int settleBatch;
    private final int settlers;
    private final Duration pollInterval;
    private final Long leaseMs;
    private final Duration shutdownGrace;
    private final DeadLetterListener deadLetterListener;
    private final boolean virtualThreads;

    private final Semaphore slots;
    private final Map<String, Running> running = new ConcurrentHashMap<>();
    private final AtomicInteger active = new AtomicInteger();
    private final LinkedBlockingQueue<Settle> settles = new LinkedBlockingQueue<>();
    private final Object wake = new Object();
    private final List<Thread> claimThreads = new ArrayList<>();
    private final List<Thread> settleThreads = new ArrayList<>();
    private Thread leaseThread;
    private ExecutorService handlers;
    private boolean usingVirtualThreads;
    private volatile boolean claiming;
    private volatile boolean forced;
    private volatile boolean settling;
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
        this.pollInterval = b.pollInterval;
        this.leaseMs = b.leaseMs;
        this.shutdownGrace = b.shutdownGrace;
        this.deadLetterListener = b.deadLetterListener;
        this.virtualThreads = b.virtualThreads;
        this.slots = new Semaphore(concurrency);
    }

    /** A builder for a worker using {@code client}. */
    public static Builder builder(RdqClient client) {
        return new Builder(client);
    }

    /** Starts claiming. A worker starts once. */
    public Worker start() {
        if (!started.compareAndSet(false, true)) {
            throw new IllegalStateException("the worker was already started");
        }
        handlers = virtualThreads ? newVirtualThreadExecutor() : null;
        usingVirtualThreads = handlers != null;
        if (handlers == null) {
            handlers = Executors.newFixedThreadPool(concurrency, daemon("rdq-handler"));
        }
        claiming = true;
        settling = true;
        for (int i = 0; i < settlers; i++) {
            Thread t = daemon("rdq-settler").newThread(this::settleLoop);
            settleThreads.add(t);
            t.start();
        }
        leaseThread = daemon("rdq-lease").newThread(this::leaseLoop);
        leaseThread.start();
        for (QueueRoutes q : queues.values()) {
            for (int i = 0; i < claimers; i++) {
                Thread t = daemon("rdq-claim-" + q.queue).newThread(() -> claimLoop(q));
                claimThreads.add(t);
                t.start();
            }
        }
        return this;
    }

    /** True when handlers run on virtual threads (JDK 21+ and not disabled). */
    public boolean usesVirtualThreads() {
        return usingVirtualThreads;
    }

    /** Handlers running now. */
    public int inFlight() {
        return running.size();
    }

    /** Graceful shutdown with the configured grace ({@link Builder#shutdownGrace(Duration)}). */
    @Override
    public void close() {
        shutdown(shutdownGrace);
    }

    /**
     * Stops claiming; waits up to {@code grace} for running handlers to
     * finish and settle; then interrupts those still running and hands their
     * tasks back (RELEASE); flushes every pending settle; stops its threads.
     */
    public void shutdown(Duration grace) {
        if (!closed.compareAndSet(false, true) || !started.get()) {
            return;
        }
        long deadline = System.nanoTime() + grace.toNanos();
        claiming = false;
        synchronized (wake) {
            wake.notifyAll();
        }
        for (Thread t : claimThreads) {
            joinQuietly(t, Long.MAX_VALUE);
        }
        waitForHandlers(deadline);
        if (active.get() > 0) {
            forced = true;
            for (Running r : running.values()) {
                r.thread.interrupt();
            }
            // Interrupted handlers unwind and release their tasks themselves;
            // those that ignore the interrupt are released from here.
            waitForHandlers(System.nanoTime() + TimeUnit.SECONDS.toNanos(2));
            for (Running r : running.values()) {
                if (r.finished.compareAndSet(false, true)) {
                    settles.add(Settle.release(r.claimed.id(), r.claimed.leaseToken()));
                }
            }
        }
        leaseThread.interrupt();
        joinQuietly(leaseThread, Long.MAX_VALUE);
        settling = false;
        for (Thread t : settleThreads) {
            joinQuietly(t, Long.MAX_VALUE);
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
    // Claiming

    private void claimLoop(QueueRoutes q) {
        long backoffMs = 0;
        while (claiming) {
            int n;
            try {
                if (!slots.tryAcquire(pollInterval.toMillis(), TimeUnit.MILLISECONDS)) {
                    continue;
                }
            } catch (InterruptedException e) {
                return;
            }
            n = 1 + takeSlots(claimBatch - 1);
            // Under load, wait a moment for more free slots rather than
            // claiming one task at a time: one claim is one store transaction.
            for (int spin = 0; spin < 4 && n < claimBatch / 4 && active.get() > 0; spin++) {
                pause(1);
                n += takeSlots(claimBatch - n);
            }
            List<ClaimedTask> claimed;
            try {
                claimed = client.claim(q.queue, n, leaseMs);
                backoffMs = 0;
            } catch (RdqException e) {
                slots.release(n);
                backoffMs = Math.min(5000, Math.max(backoffMs * 2, pollInterval.toMillis()));
                LOG.log(System.Logger.Level.WARNING, "claim on " + q.queue + " failed: " + e.getMessage());
                pause(backoffMs);
                continue;
            }
            slots.release(n - claimed.size());
            for (ClaimedTask c : claimed) {
                if (!claiming) {
                    // Claimed as the worker began to stop: handed back unrun.
                    settles.add(Settle.release(c.id(), c.leaseToken()));
                    slots.release();
                    continue;
                }
                active.incrementAndGet();
                Running r = new Running(c, q);
                try {
                    handlers.execute(() -> run(r));
                } catch (RuntimeException e) {
                    active.decrementAndGet();
                    slots.release();
                    settles.add(Settle.release(c.id(), c.leaseToken()));
                }
            }
            if (claimed.isEmpty()) {
                pause(pollInterval.toMillis());
            }
        }
    }

    private int takeSlots(int max) {
        int n = 0;
        while (n < max && slots.tryAcquire()) {
            n++;
        }
        return n;
    }

    private void pause(long ms) {
        synchronized (wake) {
            if (!claiming) {
                return;
            }
            try {
                wake.wait(ms);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    // ------------------------------------------------------------------
    // Running

    private void run(Running r) {
        try {
            if (forced) {
                if (r.finished.compareAndSet(false, true)) {
                    settles.add(Settle.release(r.claimed.id(), r.claimed.leaseToken()));
                }
                return;
            }
            r.thread = Thread.currentThread();
            running.put(r.claimed.id(), r);
            Object ret = null;
            Throwable err = null;
            TaskContext.set(new TaskContext(r));
            // The task's trace context for the handler (and the mapper), so
            // its submits continue the task's trace; restored afterwards.
            TraceContext.Scope trace = TraceContext.open(r.claimed.envelope().header(TraceContext.HEADER).orElse(null));
            try {
                try {
                    Envelope env = r.claimed.envelope();
                    RouteHandler h = r.queue.handlerFor(env.handlerRef());
                    if (h == null) {
                        err = new UnknownHandlerException(env.queue(), env.handlerRef());
                    } else {
                        ret = h.invoke(env);
                    }
                } catch (Throwable t) {
                    err = t;
                } finally {
                    running.remove(r.claimed.id());
                    Thread.interrupted();
                }
                if (!r.finished.compareAndSet(false, true)) {
                    return;
                }
                if (r.leaseLost) {
                    // The lease is gone (reaped, reclaimed): a settle would be refused.
                    return;
                }
                if (err != null && forced) {
                    settles.add(Settle.release(r.claimed.id(), r.claimed.leaseToken()));
                    return;
                }
                // The mapper runs with the task's context still set.
                Outcome o = err instanceof UnknownHandlerException u ? Outcome.permanent(u) : r.queue.ladder.decide(ret, err);
                settles.add(toSettle(r.claimed, o));
            } finally {
                trace.close();
                TaskContext.clear();
            }
        } finally {
            slots.release();
            active.decrementAndGet();
        }
    }

    static Settle toSettle(ClaimedTask c, Outcome o) {
        ErrorInfo e = o.error().orElse(null);
        switch (o.kind()) {
            case SUCCESS:
                return Settle.success(c.id(), c.leaseToken());
            case RETRYABLE_FAILURE:
                return new Settle(c.id(), c.leaseToken(), SettleOutcome.RETRYABLE_FAILURE, e, null);
            case PERMANENT_FAILURE:
                return new Settle(c.id(), c.leaseToken(), SettleOutcome.PERMANENT_FAILURE, e, null);
            case UNCLASSIFIED_FAILURE:
                return new Settle(c.id(), c.leaseToken(), SettleOutcome.FAILURE, e, null);
            case DEFER:
            default:
                return Settle.defer(c.id(), c.leaseToken(), o.deferDelay().orElse(Duration.ZERO).toMillis(),
                        o.throttle().orElse(null));
        }
    }

    // ------------------------------------------------------------------
    // Settling

    private void settleLoop() {
        List<Settle> batch = new ArrayList<>(settleBatch);
        while (true) {
            Settle first;
            try {
                first = settles.poll(50, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                first = null;
            }
            if (first == null) {
                if (!settling && settles.isEmpty()) {
                    return;
                }
                continue;
            }
            batch.clear();
            batch.add(first);
            settles.drainTo(batch, settleBatch - 1);
            sendSettles(batch);
        }
    }

    private void sendSettles(List<Settle> batch) {
        long backoff = 50;
        for (int attempt = 1; ; attempt++) {
            try {
                List<SettleResult> results = client.settle(batch, deadLetterListener != null);
                for (SettleResult r : results) {
                    if (r.ok()) {
                        Envelope env = r.envelope();
                        if (env != null && env.status() == Status.DEAD && deadLetterListener != null) {
                            try {
                                deadLetterListener.onDeadLetter(env);
                            } catch (RuntimeException | Error e) {
                                LOG.log(System.Logger.Level.WARNING, "dead-letter listener failed", e);
                            }
                        }
                    } else {
                        // UNSUPPORTED (a throttle on a store without flow limits) is a
                        // deployment problem, not a race: say so louder.
                        System.Logger.Level level = "UNSUPPORTED".equals(r.code()) ? System.Logger.Level.WARNING
                                : System.Logger.Level.DEBUG;
                        LOG.log(level, "settle of " + r.id() + " refused: " + r.code()
                                + (r.detail() == null ? "" : ": " + r.detail()));
                    }
                }
                return;
            } catch (RdqException e) {
                if (attempt >= 8) {
                    // Left to the lease: the reaper makes the tasks due again.
                    LOG.log(System.Logger.Level.WARNING, "giving up on " + batch.size() + " settles: " + e.getMessage());
                    return;
                }
                try {
                    Thread.sleep(backoff);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                }
                backoff = Math.min(2000, backoff * 2);
            }
        }
    }

    // ------------------------------------------------------------------
    // Leases

    private void leaseLoop() {
        while (!Thread.currentThread().isInterrupted()) {
            long now = System.nanoTime();
            for (Running r : running.values()) {
                if (now >= r.renewAt && !r.leaseLost) {
                    r.extendNow(r.leaseMs);
                }
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /** One claimed task while its handler runs. */
    final class Running {
        final ClaimedTask claimed;
        final QueueRoutes queue;
        final long leaseMs;
        final AtomicBoolean finished = new AtomicBoolean();
        volatile Thread thread;
        volatile long renewAt;
        volatile long expiresAt;
        volatile boolean leaseLost;

        Running(ClaimedTask claimed, QueueRoutes queue) {
            this.claimed = claimed;
            this.queue = queue;
            this.leaseMs = leaseOf(claimed.envelope());
            long now = System.nanoTime();
            this.renewAt = now + TimeUnit.MILLISECONDS.toNanos(leaseMs / 3);
            this.expiresAt = now + TimeUnit.MILLISECONDS.toNanos(leaseMs);
        }

        synchronized void extendNow(long extendMs) {
            if (leaseLost || finished.get()) {
                return;
            }
            long now = System.nanoTime();
            try {
                client.extendLease(claimed.id(), claimed.leaseToken(), extendMs);
                renewAt = now + TimeUnit.MILLISECONDS.toNanos(Math.max(1, extendMs / 3));
                expiresAt = now + TimeUnit.MILLISECONDS.toNanos(extendMs);
            } catch (RdqException e) {
                if ("LEASE_LOST".equals(e.code()) || "TASK_NOT_FOUND".equals(e.code()) || System.nanoTime() >= expiresAt) {
                    lost();
                } else {
                    renewAt = now + TimeUnit.MILLISECONDS.toNanos(Math.min(250, Math.max(1, leaseMs / 10)));
                }
            }
        }

        private void lost() {
            leaseLost = true;
            Thread t = thread;
            if (t != null && !finished.get()) {
                t.interrupt();
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

    private static ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    private static void joinQuietly(Thread t, long ms) {
        try {
            t.join(ms == Long.MAX_VALUE ? 0 : ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ------------------------------------------------------------------
    // Routing

    /** A registered handler of either shape. */
    interface RouteHandler {
        Object invoke(Envelope env) throws Exception;
    }

    static final class QueueRoutes {
        final String queue;
        final Map<String, RouteHandler> byRef;
        final RouteHandler fallback;
        final OutcomeLadder ladder;

        QueueRoutes(String queue, Map<String, RouteHandler> byRef, RouteHandler fallback, OutcomeLadder ladder) {
            this.queue = queue;
            this.byRef = byRef;
            this.fallback = fallback;
            this.ladder = ladder;
        }

        RouteHandler handlerFor(String ref) {
            RouteHandler h = byRef.get(ref);
            return h != null ? h : fallback;
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
        private Duration pollInterval = Duration.ofMillis(200);
        private Long leaseMs;
        private Duration shutdownGrace = Duration.ofSeconds(30);
        private DeadLetterListener deadLetterListener;
        private boolean virtualThreads = true;

        private Builder(RdqClient client) {
            this.client = Objects.requireNonNull(client, "client");
        }

        private RoutesBuilder routes(String queue) {
            dev.rdq.envelope.Names.validateQueueName(queue);
            return routes.computeIfAbsent(queue, RoutesBuilder::new);
        }

        /** Runs tasks of {@code handlerRef} on {@code queue} with {@code handler}. */
        public Builder handler(String queue, String handlerRef, Handler handler) {
            Objects.requireNonNull(handler, "handler");
            dev.rdq.envelope.Names.validateHandlerRef(handlerRef);
            routes(queue).byRef.put(handlerRef, env -> {
                handler.handle(env);
                return null;
            });
            return this;
        }

        /** Runs every task of {@code queue} whose handler_ref has no handler of its own. */
        public Builder handler(String queue, Handler handler) {
            Objects.requireNonNull(handler, "handler");
            routes(queue).fallback = env -> {
                handler.handle(env);
                return null;
            };
            return this;
        }

        /** Runs tasks of {@code handlerRef} on {@code queue} with a handler that returns a value. */
        public Builder valueHandler(String queue, String handlerRef, ValueHandler handler) {
            Objects.requireNonNull(handler, "handler");
            dev.rdq.envelope.Names.validateHandlerRef(handlerRef);
            routes(queue).byRef.put(handlerRef, handler::handle);
            return this;
        }

        /** Makes {@code mapper} authoritative for every call on {@code queue}. */
        public Builder outcomeMapper(String queue, OutcomeMapper mapper) {
            routes(queue).mapper = Objects.requireNonNull(mapper, "mapper");
            return this;
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

        /** Handlers running at once (default 64). */
        public Builder concurrency(int n) {
            this.concurrency = positive(n, "concurrency");
            return this;
        }

        /** Most tasks per claim (default 64, at most 1000). */
        public Builder claimBatch(int n) {
            this.claimBatch = Math.min(1000, positive(n, "claimBatch"));
            return this;
        }

        /** Claim loops per queue (default 1); more overlap claim round trips. */
        public Builder claimers(int n) {
            this.claimers = positive(n, "claimers");
            return this;
        }

        /** Most settles per {@code POST /v1/settle} (default 512, at most 1000). */
        public Builder settleBatch(int n) {
            this.settleBatch = Math.min(1000, positive(n, "settleBatch"));
            return this;
        }

        /** Settle requests in flight at once (default 2). */
        public Builder settlers(int n) {
            this.settlers = positive(n, "settlers");
            return this;
        }

        /** Longest idle wait between claims of an empty queue (default 200 ms). */
        public Builder pollInterval(Duration d) {
            this.pollInterval = Objects.requireNonNull(d);
            return this;
        }

        /** Lease of each claim; default the queue's {@code lease_ms}. */
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
        final Map<String, RouteHandler> byRef = new HashMap<>();
        RouteHandler fallback;
        OutcomeMapper mapper;

        RoutesBuilder(String queue) {
            this.queue = queue;
        }

        QueueRoutes build(Builder b) {
            return new QueueRoutes(queue, Map.copyOf(byRef), fallback, new OutcomeLadder(mapper, b.retryable, b.nonRetryable));
        }
    }
}
