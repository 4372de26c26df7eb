package dev.rdq.worker;

import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.CancelRequest;
import dev.rdq.envelope.Envelope;
import java.time.Duration;
import java.util.Optional;

/**
 * What a running handler may ask about its task: {@code TaskContext.current()}
 * on the handler's thread.
 */
public final class TaskContext {
    private static final ThreadLocal<TaskContext> CURRENT = new ThreadLocal<>();

    private final RunningTask running;

    TaskContext(RunningTask running) {
        this.running = running;
    }

    /** The context of the task running on this thread, if any. */
    public static Optional<TaskContext> current() {
        return Optional.ofNullable(CURRENT.get());
    }

    static void set(TaskContext c) {
        CURRENT.set(c);
    }

    static void clear() {
        CURRENT.remove();
    }

    /** The task's id. */
    public String id() {
        return running.task.id;
    }

    /** The task as claimed (IN_FLIGHT, its open attempt last). */
    public Envelope task() {
        return running.task.envelope();
    }

    /**
     * The lease token of this claim, as the store's SQL functions take it:
     * with the PostgreSQL store, {@code TransactionalComplete.complete(connection,
     * schema, id(), leaseToken())} settles the task's success in the
     * handler's own transaction ({@code docs/stores/postgres.md}, "Completing
     * inside your transaction"); then call {@link #settledElsewhere()}.
     */
    public String leaseToken() {
        return running.task.leaseToken;
    }

    /**
     * Tells the worker the handler settled this task itself (its success
     * committed with the handler's own writes): the worker sends no settle
     * for it, whatever the handler returns or throws, and stops extending its
     * lease. Call it once that transaction has committed. Does nothing when
     * the worker already let go of the task (its lease was lost, its timeout
     * settled it).
     */
    public void settledElsewhere() {
        running.settledElsewhere();
    }

    /** This attempt's number within the task's history (1-based). */
    public long attemptNo() {
        Envelope task = task();
        return task.openAttempt().map(a -> a.attemptNo()).orElse(task.attemptCount() + 1);
    }

    /** The correlation id: {@code rdq.correlation_id} (Rust SDK, queuey) or {@link SubmitRequest#CORRELATION_ID_HEADER}. */
    public Optional<String> correlationId() {
        return task().header("rdq.correlation_id").or(() -> task().header(SubmitRequest.CORRELATION_ID_HEADER));
    }

    /**
     * True once the worker cancelled this handler — its timeout passed, its
     * lease was lost, the worker is shutting down, or a cancel was asked of
     * the task — and interrupted its thread (once): a long handler checks it
     * between steps and stops.
     */
    public boolean isCancelled() {
        return running.cancelReason() != null;
    }

    /** Why the handler was cancelled, if it was ({@link CancelReason#CANCEL_REQUESTED} for a cancel asked of the task). */
    public Optional<CancelReason> cancelReason() {
        return Optional.ofNullable(running.cancelReason());
    }

    /**
     * The cancel asked of this task while it runs ({@code RdqClient.cancel},
     * {@code rdq task cancel}, the dashboard), once the worker learns of it:
     * who asked ({@link CancelRequest#by()}), when and why. Present also when
     * the handler had already been cancelled for another reason.
     */
    public Optional<CancelRequest> cancelRequest() {
        return Optional.ofNullable(running.cancelRequest());
    }

    /** True once the lease was lost (the handler is also cancelled then). */
    public boolean leaseLost() {
        return running.leaseLost();
    }

    /** Extends the lease now to end {@code extension} from now (the worker also does this on its own). */
    public void extendLease(Duration extension) {
        running.extendNow(extension.toMillis());
    }
}
