package dev.rdq.worker;

import dev.rdq.client.ClaimedTask;
import dev.rdq.envelope.CancelRequest;
import dev.rdq.envelope.Envelope;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

/**
 * A task handed to this worker, as the worker needs it: what routing, leases
 * and settling read, with the full envelope built only when someone asks
 * ({@link TaskContext#task()}, a handler of {@code Envelope}). A task from the
 * Work stream arrives as protobuf; turning it into an {@link Envelope} costs
 * more than a no-op handler, so it is not done for every task.
 */
final class Leased {
    final String id;
    final String leaseToken;
    final String queue;
    final String handlerRef;
    /** The task's {@code traceparent} header, or null. */
    final String traceparent;
    /** The lease the server gave, in milliseconds. */
    final long leaseMs;
    /** Where the task came from: its settle goes back there. */
    final TaskSource source;
    /** The Work stream that handed it out (its credit belongs there); 0 for HTTP. */
    final long generation;
    private final Supplier<byte[]> payload;
    /** The cancel asked of this claim through the API, once the worker learns of it. */
    private final AtomicReference<CancelRequest> cancelRequest = new AtomicReference<>();
    private Supplier<Envelope> envelopeOf;
    private Envelope envelope;

    Leased(String id, String leaseToken, String queue, String handlerRef, String traceparent, long leaseMs,
            TaskSource source, long generation, Supplier<byte[]> payload, Supplier<Envelope> envelopeOf) {
        this.id = id;
        this.leaseToken = leaseToken;
        this.queue = queue;
        this.handlerRef = handlerRef;
        this.traceparent = traceparent;
        this.leaseMs = leaseMs;
        this.source = source;
        this.generation = generation;
        this.payload = payload;
        this.envelopeOf = envelopeOf;
    }

    /** A task from an HTTP claim: the envelope is already decoded. */
    static Leased of(ClaimedTask c, TaskSource source) {
        Envelope env = c.envelope();
        Leased l = new Leased(c.id(), c.leaseToken(), env.queue(), env.handlerRef(),
                env.header(dev.rdq.client.TraceContext.HEADER).orElse(null), Worker.leaseOf(env), source, 0,
                env::payload, null);
        l.envelope = env;
        return l;
    }

    /** The cancel asked of the task, or null. */
    CancelRequest cancelRequest() {
        return cancelRequest.get();
    }

    /** Keeps {@code request} unless one was recorded before. */
    void recordCancelRequest(CancelRequest request) {
        cancelRequest.compareAndSet(null, request);
    }

    byte[] payload() {
        return payload.get();
    }

    /** The envelope as claimed; an {@link dev.rdq.RdqException} if it does not map onto a valid one. */
    synchronized Envelope envelope() {
        if (envelope == null) {
            envelope = envelopeOf.get();
            envelopeOf = null;
        }
        return envelope;
    }
}
