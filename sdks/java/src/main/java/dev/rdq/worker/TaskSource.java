package dev.rdq.worker;

import dev.rdq.client.Settle;
import dev.rdq.envelope.CancelRequest;

/**
 * Where a {@link Worker} gets tasks and sends their outcomes: the gRPC Work
 * stream ({@link GrpcTaskSource}) or HTTP claims and batch settles ({@link
 * HttpTaskSource}). The worker owns handlers, leases and shutdown; a source
 * owns the wire.
 */
interface TaskSource {

    /** What a source hands its tasks to. */
    interface Sink {
        /** Runs {@code task}; false when the worker is stopping (the source then releases the task). */
        boolean accept(Leased task);
    }

    /** Starts taking tasks. */
    void start(Sink sink);

    /** Sends a settle of a task this source handed out (batched, asynchronous). */
    void settle(Leased task, Settle settle);

    /** The handler of {@code task} ended and no settle will follow (its lease is gone, or it settled the task itself). */
    void abandoned(Leased task);

    /**
     * Extends the lease of {@code task} to {@code ms} from now; an {@link
     * dev.rdq.RdqException} when refused. Answers the cancel asked of the
     * task when the answer says there is one, else null.
     */
    CancelRequest extend(Leased task, long ms);

    /** Takes no new tasks; settles still go out. */
    void stopClaiming();

    /** Sends every pending settle, then lets go of the wire. */
    void close();
}
