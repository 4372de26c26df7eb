package dev.rdq.worker;

import dev.rdq.RdqException;
import dev.rdq.envelope.CancelRequest;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * One task from the moment the worker accepts it until it is settled or let
 * go: its lease clock, its handler's thread, and whether it was cancelled.
 * Every way a running handler is stopped — timeout, lost lease, shutdown, a
 * cancel asked through the API — goes through {@link #cancel}, which sets the
 * reason once and interrupts the handler's thread at most once, and only
 * while the handler runs: an interrupt never outlives its handler into the
 * next task a pooled thread runs.
 */
final class RunningTask {
    final Leased task;
    final Routes.QueueRoutes queue;
    /** Null when the queue has no handler for the task. */
    final Routes.Route<?, ?> route;
    /** The handler's timeout; null for none. */
    final Duration timeout;
    /** Set once, by whoever settles or lets go of the task. */
    final AtomicBoolean finished = new AtomicBoolean();
    private final AtomicReference<CancelReason> cancelled = new AtomicReference<>();
    /** The handler settled the task itself ({@link TaskContext#settledElsewhere()}). */
    private volatile boolean settledElsewhere;
    /** Guards {@link #handlerRunning} and the interrupt: never held while waiting for anything. */
    private final Object interruptLock = new Object();
    private Thread handlerThread;
    private boolean handlerRunning;
    volatile long startedAt;
    volatile long renewAt;
    volatile long expiresAt;

    RunningTask(Leased task, Routes.QueueRoutes queue, Routes.Route<?, ?> route, Duration timeout) {
        this.task = task;
        this.queue = queue;
        this.route = route;
        this.timeout = timeout;
        long now = System.nanoTime();
        this.renewAt = now + TimeUnit.MILLISECONDS.toNanos(task.leaseMs / 3);
        this.expiresAt = now + TimeUnit.MILLISECONDS.toNanos(task.leaseMs);
    }

    /** Why the handler was cancelled, or null. */
    CancelReason cancelReason() {
        return cancelled.get();
    }

    /** The cancel asked of the task through the API, or null. */
    CancelRequest cancelRequest() {
        return task.cancelRequest();
    }

    /**
     * Cancels the handler for {@code reason} (the first reason sticks): sets
     * the flag {@link TaskContext#isCancelled()} reads, then interrupts the
     * handler's thread if the handler is running. Answers true for the call
     * that cancelled it.
     */
    boolean cancel(CancelReason reason) {
        if (!cancelled.compareAndSet(null, reason)) {
            return false;
        }
        synchronized (interruptLock) {
            if (handlerRunning && !finished.get()) {
                handlerThread.interrupt();
            }
        }
        return true;
    }

    /**
     * Records a cancel asked of the task (the first request is kept) and
     * cancels the handler with {@link CancelReason#CANCEL_REQUESTED} unless it
     * was already cancelled for another reason. Answers true when this call
     * cancelled it.
     */
    boolean requestCancel(CancelRequest request) {
        task.recordCancelRequest(request);
        return cancel(CancelReason.CANCEL_REQUESTED);
    }

    /**
     * Marks the handler as running on the calling thread; false (and nothing
     * marked) when the task was cancelled before its handler started.
     */
    boolean handlerStarting() {
        synchronized (interruptLock) {
            if (cancelled.get() != null) {
                return false;
            }
            handlerThread = Thread.currentThread();
            handlerRunning = true;
            return true;
        }
    }

    /** The handler returned or threw: no interrupt reaches its thread from now on, and one pending is cleared. */
    void handlerEnded() {
        synchronized (interruptLock) {
            handlerRunning = false;
            handlerThread = null;
            Thread.interrupted();
        }
    }

    /**
     * The handler settled the task itself: nothing is to be sent for it from
     * here (the worker's settle would be refused), and the lease is no longer
     * extended. The task is marked finished unless the worker let go of it
     * first.
     */
    void settledElsewhere() {
        if (finished.compareAndSet(false, true)) {
            settledElsewhere = true;
        }
    }

    boolean isSettledElsewhere() {
        return settledElsewhere;
    }

    boolean leaseLost() {
        return cancelled.get() == CancelReason.LEASE_LOST;
    }

    /** True once the handler has run longer than its timeout. */
    boolean pastTimeout(long now) {
        return timeout != null && startedAt != 0 && now - startedAt >= timeout.toNanos();
    }

    /**
     * Extends the lease now to end {@code extendMs} from now; cancels the
     * handler when the lease is gone, or when the answer says a cancel was
     * asked of the task.
     */
    synchronized void extendNow(long extendMs) {
        if (leaseLost() || finished.get()) {
            return;
        }
        long now = System.nanoTime();
        CancelRequest asked;
        try {
            asked = task.source.extend(task, extendMs);
            renewAt = now + TimeUnit.MILLISECONDS.toNanos(Math.max(1, extendMs / 3));
            expiresAt = now + TimeUnit.MILLISECONDS.toNanos(extendMs);
        } catch (RdqException e) {
            if ("LEASE_LOST".equals(e.code()) || "TASK_NOT_FOUND".equals(e.code()) || System.nanoTime() >= expiresAt) {
                cancel(CancelReason.LEASE_LOST);
            } else {
                renewAt = now + TimeUnit.MILLISECONDS.toNanos(Math.min(250, Math.max(1, task.leaseMs / 10)));
            }
            return;
        }
        if (asked != null) {
            requestCancel(asked);
        }
    }
}
