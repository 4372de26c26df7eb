package dev.rdq.worker;

import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import java.time.Duration;
import java.util.Optional;

/**
 * What a running handler may ask about its task: {@code TaskContext.current()}
 * on the handler's thread.
 */
public final class TaskContext {
    private static final ThreadLocal<TaskContext> CURRENT = new ThreadLocal<>();

    private final Worker.Running running;

    TaskContext(Worker.Running running) {
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

    /** The task as claimed (IN_FLIGHT, its open attempt last). */
    public Envelope task() {
        return running.claimed.envelope();
    }

    public String leaseToken() {
        return running.claimed.leaseToken();
    }

    /** This attempt's number within the task's history (1-based). */
    public long attemptNo() {
        return task().openAttempt().map(a -> a.attemptNo()).orElse(task().attemptCount() + 1);
    }

    /** The correlation id: {@code rdq.correlation_id} (Rust SDK, queuey) or {@link SubmitRequest#CORRELATION_ID_HEADER}. */
    public Optional<String> correlationId() {
        return task().header("rdq.correlation_id").or(() -> task().header(SubmitRequest.CORRELATION_ID_HEADER));
    }

    /** True once the lease was lost (the handler is also interrupted then). */
    public boolean leaseLost() {
        return running.leaseLost;
    }

    /** Extends the lease now to end {@code extension} from now (the worker also does this on its own). */
    public void extendLease(Duration extension) {
        running.extendNow(extension.toMillis());
    }
}
