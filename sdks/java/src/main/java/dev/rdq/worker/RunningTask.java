package dev.rdq.worker;

import dev.rdq.RdqException;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * One task from the moment the worker accepts it until it is settled or let
 * go: its lease clock, its handler's thread, and whether it was cancelled.
 * Every way a running handler is stopped — timeout, lost lease, shutdown —
 * goes through {@link #cancel}, which sets the reason once and interrupts.
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
    volatile Thread thread;
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

    /**
     * Cancels the handler for {@code reason} (the first reason sticks): sets
     * the flag {@link TaskContext#isCancelled()} reads, then interrupts the
     * handler's thread. Answers true for the call that cancelled it.
     */
    boolean cancel(CancelReason reason) {
        if (!cancelled.compareAndSet(null, reason)) {
            return false;
        }
        Thread t = thread;
        if (t != null && !finished.get()) {
            t.interrupt();
        }
        return true;
    }

    boolean leaseLost() {
        return cancelled.get() == CancelReason.LEASE_LOST;
    }

    /** True once the handler has run longer than its timeout. */
    boolean pastTimeout(long now) {
        return timeout != null && startedAt != 0 && now - startedAt >= timeout.toNanos();
    }

    /** Extends the lease now to end {@code extendMs} from now; cancels the handler when the lease is gone. */
    synchronized void extendNow(long extendMs) {
        if (leaseLost() || finished.get()) {
            return;
        }
        long now = System.nanoTime();
        try {
            task.source.extend(task, extendMs);
            renewAt = now + TimeUnit.MILLISECONDS.toNanos(Math.max(1, extendMs / 3));
            expiresAt = now + TimeUnit.MILLISECONDS.toNanos(extendMs);
        } catch (RdqException e) {
            if ("LEASE_LOST".equals(e.code()) || "TASK_NOT_FOUND".equals(e.code()) || System.nanoTime() >= expiresAt) {
                cancel(CancelReason.LEASE_LOST);
            } else {
                renewAt = now + TimeUnit.MILLISECONDS.toNanos(Math.min(250, Math.max(1, task.leaseMs / 10)));
            }
        }
    }
}
