package dev.rdq.worker;

import dev.rdq.RdqException;
import dev.rdq.client.Settle;
import dev.rdq.client.SettleResult;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import dev.rdq.envelope.CancelRequest;
import dev.rdq.internal.ProtoEnvelopes;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingDeque;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import rdq.v1.Api;
import rdq.v1.EnvelopeOuterClass;

/**
 * Tasks over one gRPC {@code rdq.v1.Workers/Work} stream ({@code docs/grpc.md},
 * "The Work stream"): a {@code WorkHello} with the worker's queues and credits,
 * leased tasks pushed while credits allow, settles sent in batches as {@code
 * WorkSettle} (each gives its task's credit back), lease extensions as {@code
 * WorkExtend}, each answered by a {@code WorkAck} matched by {@code seq}.
 *
 * <p>Credits. Every task handed out holds a credit until its settle reaches
 * the server; a task whose handler ends without a settle (lost lease) gives
 * its credit back with a {@code WorkCredit}. A stream that breaks is opened
 * again with the credits not held by tasks still running; those tasks'
 * settles (and any whose acknowledgement the break lost) go out on the new
 * stream, each with a {@code WorkCredit}, since a settle gives back only a
 * credit of the stream that handed the task out.
 *
 * <p>Shutdown. Once the worker stops taking tasks, settles go as unary
 * {@code Workers/SettleBatch} calls, which give no credit back, so the server
 * pushes nothing more; a task pushed anyway is released the same way.
 *
 * <p>Cancels. A {@code WorkCancel} says a cancel was asked of a task this
 * stream handed out: the worker stops its handler. A lease extension's
 * result with {@code cancel_requested} says the same (when the notice was
 * lost with a broken stream).
 *
 * <p>A {@code WorkResponse} of a kind this SDK does not know is ignored: the
 * server may grow new kinds.
 */
final class GrpcTaskSource implements TaskSource {
    private static final System.Logger LOG = System.getLogger("dev.rdq.worker");
    /** Unacknowledged settles on one stream: the server stores up to 64 of a stream at once. */
    private static final int WINDOW = 64;
    private static final long CALL_TIMEOUT_MS = 30_000;
    /** The longest a settle waits for others to join its batch while handlers run. */
    private static final long LINGER_NANOS = TimeUnit.MILLISECONDS.toNanos(2);
    /** {@link CancelRequest#by()} of a cancel whose details the server's answer did not carry. */
    static final String UNKNOWN_CANCELLER = "unknown";

    private final Worker worker;
    private final GrpcChannel channel;
    private final List<String> queues;
    private final int credits;
    private final boolean withEnvelopes;
    /** Settles and credit returns waiting to be sent; a resent batch goes to the front. */
    private final LinkedBlockingDeque<Out> outbox = new LinkedBlockingDeque<>();
    /** Tasks handed out whose credit has not yet gone back to the server. */
    private final AtomicInteger held = new AtomicInteger();
    private final AtomicLong generations = new AtomicLong();
    private final AtomicLong seqs = new AtomicLong();
    private final Semaphore window = new Semaphore(WINDOW);
    /** Where acknowledgements carrying envelopes are read (the dead-letter listener runs there). */
    private final ExecutorService ackReader;
    private volatile Stream current;
    private volatile boolean claiming;
    private volatile boolean closing;
    private Sink sink;
    private Thread sender;

    /** A settle to send, or (settle null) a credit to give back for an abandoned task. */
    private record Out(Leased task, Settle settle) {}

    GrpcTaskSource(Worker worker, GrpcChannel channel, List<String> queues, int credits, boolean withEnvelopes) {
        this.worker = worker;
        this.channel = channel;
        this.queues = queues;
        this.credits = credits;
        this.withEnvelopes = withEnvelopes;
        this.ackReader = withEnvelopes ? Executors.newSingleThreadExecutor(Worker.daemon("rdq-acks")) : null;
    }

    @Override
    public void start(Sink sink) {
        this.sink = sink;
        claiming = true;
        sender = Worker.daemon("rdq-work-stream").newThread(this::sendLoop);
        sender.start();
    }

    @Override
    public void settle(Leased task, Settle settle) {
        outbox.add(new Out(task, settle));
    }

    @Override
    public void abandoned(Leased task) {
        outbox.add(new Out(task, null));
    }

    @Override
    public CancelRequest extend(Leased task, long ms) {
        Api.ExtendLeaseRequest req = Api.ExtendLeaseRequest.newBuilder()
                .setId(task.id).setLeaseToken(task.leaseToken).setExtendMs(ms).build();
        Stream s = current;
        if (s == null || s.dead) {
            Api.TaskResponse resp;
            try {
                resp = channel.workersBlocking().withDeadlineAfter(CALL_TIMEOUT_MS, TimeUnit.MILLISECONDS).extendLease(req);
            } catch (RuntimeException e) {
                throw GrpcChannel.error(e);
            }
            return resp.hasEnvelope() ? cancelOf(task, resp.getEnvelope()) : null;
        }
        long seq = seqs.incrementAndGet();
        CompletableFuture<Api.WorkAck> ack = new CompletableFuture<>();
        s.extensions.put(seq, ack);
        s.send(Api.WorkRequest.newBuilder()
                .setExtend(Api.WorkExtend.newBuilder().setSeq(seq).setExtend(req)).build());
        Api.WorkAck a;
        try {
            a = ack.get(CALL_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            throw e.getCause() instanceof RdqException r ? r : GrpcChannel.error(e.getCause());
        } catch (TimeoutException e) {
            s.extensions.remove(seq);
            throw new RdqException(RdqException.TIMEOUT, null, "no answer to a lease extension", 0, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RdqException(RdqException.INTERRUPTED, null, "interrupted", 0, e);
        }
        if (a.getResultsCount() == 0) {
            return null;
        }
        Api.SettleItemResult result = a.getResults(0);
        if (result.hasProblem()) {
            Api.Problem p = result.getProblem();
            throw new RdqException(p.getCode(), null, p.getDetail(), p.getHttpStatus(), null);
        }
        if (!result.getCancelRequested()) {
            return null;
        }
        // The flag says a cancel was asked; who and why came with the
        // WorkCancel, or with the envelope when the ack has one.
        CancelRequest known = result.hasEnvelope() ? cancelOf(task, result.getEnvelope()) : null;
        if (known == null) {
            known = task.cancelRequest();
        }
        return known != null ? known : lookUpCancelRequest(task);
    }

    /** The cancel request of a running task's envelope, or null. */
    private static CancelRequest cancelOf(Leased task, EnvelopeOuterClass.Envelope e) {
        if (e.getStatus() != EnvelopeOuterClass.Status.IN_FLIGHT || !e.hasCancelRequested()) {
            return null;
        }
        return cancelRequestOf(task.id, e.getCancelRequested());
    }

    /**
     * A cancel request as the server sent it; one that does not map onto a
     * valid request still cancels the task, as asked by an unknown caller.
     */
    static CancelRequest cancelRequestOf(String id, EnvelopeOuterClass.CancelRequest r) {
        try {
            return ProtoEnvelopes.toCancelRequest(r);
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "the cancel of " + id + ": " + e.getMessage());
            return unknownCancelRequest();
        }
    }

    static CancelRequest unknownCancelRequest() {
        return CancelRequest.of(UNKNOWN_CANCELLER, Instant.ofEpochMilli(System.currentTimeMillis()), null);
    }

    /** Who asked, read from the task ({@code Tasks/Get}) when only the flag said a cancel was asked. */
    private CancelRequest lookUpCancelRequest(Leased task) {
        try {
            Api.TaskResponse t = channel.tasksBlocking().withDeadlineAfter(5_000, TimeUnit.MILLISECONDS)
                    .get(Api.GetTaskRequest.newBuilder().setId(task.id).build());
            CancelRequest r = t.hasEnvelope() ? cancelOf(task, t.getEnvelope()) : null;
            if (r != null) {
                return r;
            }
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.DEBUG, "reading the cancel of " + task.id + ": " + GrpcChannel.error(e).getMessage());
        }
        return unknownCancelRequest();
    }

    /**
     * Ends the stream once the settles sent on it are acknowledged (2 s at
     * most): a stream left open would be pushed a task for every credit still
     * free. Later settles and extensions go as unary calls.
     */
    @Override
    public void stopClaiming() {
        claiming = false;
        Stream s = current;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
        while (s != null && !s.dead && !s.settles.isEmpty() && System.nanoTime() < deadline) {
            sleep(5);
        }
        if (s != null && !s.dead) {
            s.cancel();
        }
    }

    @Override
    public void close() {
        claiming = false;
        closing = true;
        Worker.joinQuietly(sender);
        if (ackReader != null) {
            ackReader.shutdown();
            try {
                ackReader.awaitTermination(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    // ------------------------------------------------------------------
    // Sending

    private void sendLoop() {
        long backoffMs = 0;
        List<Out> batch = new ArrayList<>(worker.settleBatch);
        long drainDeadline = Long.MAX_VALUE;
        while (true) {
            Stream s = current;
            if (claiming && (s == null || s.dead)) {
                if (s != null && !s.delivered) {
                    backoffMs = Math.min(5_000, Math.max(100, backoffMs * 2));
                    LOG.log(System.Logger.Level.WARNING, "the Work stream failed (" + s.failure + "); opening it again in "
                            + backoffMs + " ms");
                    sleep(backoffMs);
                } else {
                    backoffMs = 0;
                }
                if (claiming) {
                    s = connect();
                }
            }
            Out first;
            try {
                first = outbox.poll(20, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                first = null;
            }
            if (first == null) {
                if (closing) {
                    // Done once nothing waits and the stream's settles are acknowledged (or 10 s passed).
                    drainDeadline = Math.min(drainDeadline, System.nanoTime() + TimeUnit.SECONDS.toNanos(10));
                    if (s == null || s.dead || s.settles.isEmpty() || System.nanoTime() > drainDeadline) {
                        return;
                    }
                }
                continue;
            }
            batch.clear();
            batch.add(first);
            outbox.drainTo(batch, worker.settleBatch - 1);
            linger(batch);
            if (!claiming || s == null || s.dead) {
                sendUnary(batch);
            } else {
                sendOnStream(s, batch);
            }
        }
    }

    /**
     * Lets a batch grow while handlers are still running, to a quarter of
     * the credits or for {@link #LINGER_NANOS}: each WorkSettle is one store
     * call on the server, so a busy worker sends fewer, larger ones (as the
     * Rust client sends a batch once no more of its tasks are waiting), and
     * the credits they return are enough for the server to push a batch. An
     * idle worker sends at once.
     */
    private void linger(List<Out> batch) {
        // A quarter of the credits is what makes the server push again.
        int enough = Math.max(1, Math.min(worker.settleBatch, credits / 4));
        long deadline = System.nanoTime() + LINGER_NANOS;
        while (batch.size() < enough && worker.active.get() > 0 && System.nanoTime() < deadline) {
            Out next;
            try {
                next = outbox.poll(100, TimeUnit.MICROSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
            if (next != null) {
                batch.add(next);
                outbox.drainTo(batch, worker.settleBatch - batch.size());
            }
        }
    }

    private Stream connect() {
        Stream s = new Stream(generations.incrementAndGet());
        // Tasks still running from an earlier stream keep their credits out of this one.
        int free = Math.max(1, credits - held.get());
        Api.WorkHello.Builder hello = Api.WorkHello.newBuilder().addAllQueues(queues).setCredits(free)
                .setBareAcks(!withEnvelopes)
                // A claim's tasks in one message: a message costs the
                // stream's event loop far more than a task in it.
                .setTaskBatches(true);
        if (worker.leaseMs != null) {
            hello.setLeaseMs(worker.leaseMs);
        }
        current = s;
        channel.workers().work(s);
        s.send(Api.WorkRequest.newBuilder().setHello(hello).build());
        return s;
    }

    private void sendOnStream(Stream s, List<Out> batch) {
        int credit = 0;
        List<Out> settles = new ArrayList<>(batch.size());
        Api.WorkSettle.Builder msg = Api.WorkSettle.newBuilder();
        for (Out o : batch) {
            if (o.settle == null) {
                credit++;
                held.decrementAndGet();
                continue;
            }
            if (o.task.generation != s.generation) {
                credit++;
            }
            settles.add(o);
            msg.addSettles(WorkMessages.settle(o.settle));
        }
        if (!settles.isEmpty()) {
            try {
                while (!window.tryAcquire(20, TimeUnit.MILLISECONDS)) {
                    if (s.dead) {
                        requeue(settles);
                        return;
                    }
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                requeue(settles);
                return;
            }
            long seq = seqs.incrementAndGet();
            s.settles.put(seq, settles);
            if (s.dead && s.settles.remove(seq) != null) {
                window.release();
                requeue(settles);
                return;
            }
            s.send(Api.WorkRequest.newBuilder().setSettle(msg.setSeq(seq)).build());
        }
        if (credit > 0) {
            s.send(Api.WorkRequest.newBuilder().setCredit(Api.WorkCredit.newBuilder().setCredits(credit)).build());
        }
    }

    private void requeue(List<Out> settles) {
        for (int i = settles.size() - 1; i >= 0; i--) {
            outbox.addFirst(settles.get(i));
        }
    }

    /** Settles as one {@code Workers/SettleBatch} call (shutting down, or no stream), retried as over HTTP. */
    private void sendUnary(List<Out> batch) {
        Api.SettleBatchRequest.Builder req = Api.SettleBatchRequest.newBuilder();
        int n = 0;
        for (Out o : batch) {
            held.decrementAndGet();
            if (o.settle != null) {
                req.addSettles(WorkMessages.settle(o.settle));
                n++;
            }
        }
        if (n == 0) {
            return;
        }
        long backoff = 50;
        for (int attempt = 1; ; attempt++) {
            try {
                Api.SettleBatchResponse resp = channel.workersBlocking()
                        .withDeadlineAfter(CALL_TIMEOUT_MS, TimeUnit.MILLISECONDS).settleBatch(req.build());
                for (Api.SettleItemResult r : resp.getResultsList()) {
                    worker.settled(result(r));
                }
                return;
            } catch (RuntimeException e) {
                if (attempt >= 8) {
                    LOG.log(System.Logger.Level.WARNING, "giving up on " + n + " settles: " + GrpcChannel.error(e).getMessage());
                    return;
                }
                sleep(backoff);
                backoff = Math.min(2000, backoff * 2);
            }
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ------------------------------------------------------------------
    // Receiving

    private void onTask(Stream s, Api.LeasedTask t) {
        held.incrementAndGet();
        Leased task = leased(t, s.generation);
        if (!claiming || !sink.accept(task)) {
            outbox.add(new Out(task, Settle.release(task.id, task.leaseToken)));
        }
    }

    /** A cancel was asked of a task this stream handed out: its handler is stopped. */
    private void onCancel(Api.WorkCancel c) {
        try {
            CancelRequest request = c.hasRequest() ? cancelRequestOf(c.getId(), c.getRequest()) : unknownCancelRequest();
            worker.cancelRequested(c.getId(), c.getLeaseToken(), request);
        } catch (RuntimeException e) {
            // Never out of the stream's callback: the lease extension's answer says it again.
            LOG.log(System.Logger.Level.WARNING, "the cancel of " + c.getId() + " failed", e);
        }
    }

    private void onSettleAck(List<Out> settles, Api.WorkAck ack) {
        window.release();
        held.addAndGet(-settles.size());
        if (ackReader == null) {
            readAck(ack);
        } else {
            ackReader.execute(() -> readAck(ack));
        }
    }

    private void readAck(Api.WorkAck ack) {
        for (Api.SettleItemResult r : ack.getResultsList()) {
            if (r.hasProblem() || withEnvelopes) {
                worker.settled(result(r));
            }
        }
    }

    private Leased leased(Api.LeasedTask t, long generation) {
        EnvelopeOuterClass.Envelope e = t.getEnvelope();
        long lease = worker.leaseMs != null ? worker.leaseMs : WorkMessages.leaseOf(e);
        return new Leased(t.getId(), t.getLeaseToken(), e.getQueue(), e.getHandlerRef(),
                e.getHeadersOrDefault(dev.rdq.client.TraceContext.HEADER, null), lease, this, generation,
                () -> e.getPayload().toByteArray(), () -> ProtoEnvelopes.toEnvelope(e));
    }

    private SettleResult result(Api.SettleItemResult r) {
        if (r.hasProblem()) {
            Api.Problem p = r.getProblem();
            return new SettleResult(r.getId(), p.getHttpStatus(), null, p.getCode(), p.getDetail());
        }
        return new SettleResult(r.getId(), 200,
                withEnvelopes && r.hasEnvelope() ? ProtoEnvelopes.toEnvelope(r.getEnvelope()) : null, null, null);
    }

    /** One Work stream: its generation, its unacknowledged settles and extensions. */
    private final class Stream implements ClientResponseObserver<Api.WorkRequest, Api.WorkResponse> {
        final long generation;
        final Map<Long, List<Out>> settles = new ConcurrentHashMap<>();
        final Map<Long, CompletableFuture<Api.WorkAck>> extensions = new ConcurrentHashMap<>();
        private ClientCallStreamObserver<Api.WorkRequest> requests;
        volatile boolean dead;
        /** True once the server sent anything: a stream that breaks after that is opened again at once. */
        volatile boolean delivered;
        volatile String failure;

        Stream(long generation) {
            this.generation = generation;
        }

        @Override
        public void beforeStart(ClientCallStreamObserver<Api.WorkRequest> requests) {
            this.requests = requests;
        }

        synchronized void send(Api.WorkRequest r) {
            if (!dead) {
                try {
                    requests.onNext(r);
                } catch (IllegalStateException e) {
                    // Cancelled meanwhile: onError follows and requeues what was not acknowledged.
                }
            }
        }

        void cancel() {
            requests.cancel("the worker stops taking tasks", null);
        }

        @Override
        public void onNext(Api.WorkResponse r) {
            delivered = true;
            switch (r.getKindCase()) {
                case TASK -> onTask(this, r.getTask());
                case TASKS -> {
                    for (Api.LeasedTask t : r.getTasks().getTasksList()) {
                        onTask(this, t);
                    }
                }
                case CANCEL -> onCancel(r.getCancel());
                case ACK -> {
                    Api.WorkAck ack = r.getAck();
                    List<Out> batch = settles.remove(ack.getSeq());
                    if (batch != null) {
                        onSettleAck(batch, ack);
                    } else {
                        CompletableFuture<Api.WorkAck> f = extensions.remove(ack.getSeq());
                        if (f != null) {
                            f.complete(ack);
                        }
                    }
                }
                default -> {
                    // A kind this SDK does not know (a newer server): ignored.
                }
            }
        }

        @Override
        public void onError(Throwable t) {
            failure = GrpcChannel.error(t).getMessage();
            broken(GrpcChannel.error(t));
        }

        @Override
        public void onCompleted() {
            failure = "the server ended the stream";
            broken(new RdqException(RdqException.CONNECTION_FAILED, null, failure, 0, null));
        }

        private void broken(RdqException e) {
            synchronized (this) {
                dead = true;
            }
            // Settles whose acknowledgement is lost go out again (a repeat of
            // one that was stored is refused harmlessly); extensions fail.
            for (Long seq : settles.keySet()) {
                List<Out> batch = settles.remove(seq);
                if (batch != null) {
                    window.release();
                    requeue(batch);
                }
            }
            for (Long seq : extensions.keySet()) {
                CompletableFuture<Api.WorkAck> f = extensions.remove(seq);
                if (f != null) {
                    f.completeExceptionally(e);
                }
            }
        }
    }
}
