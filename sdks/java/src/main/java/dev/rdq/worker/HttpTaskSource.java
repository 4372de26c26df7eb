package dev.rdq.worker;

import dev.rdq.RdqException;
import dev.rdq.client.ClaimedTask;
import dev.rdq.client.RdqClient;
import dev.rdq.client.Settle;
import dev.rdq.client.SettleResult;
import dev.rdq.envelope.CancelRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.Status;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Tasks over HTTP: claim loops ({@code POST /v1/queues/{q}/claim}, as many
 * tasks as there are free handler slots), settler threads sending batches
 * ({@code POST /v1/settle}), extensions ({@code POST /v1/tasks/{id}/lease}).
 * The fallback of the Work stream, and the transport for servers without gRPC.
 */
final class HttpTaskSource implements TaskSource {
    private static final System.Logger LOG = System.getLogger("dev.rdq.worker");

    private final Worker worker;
    private final RdqClient client;
    private final List<String> queues;
    private final boolean withEnvelopes;
    private final LinkedBlockingQueue<Settle> settles = new LinkedBlockingQueue<>();
    private final Object wake = new Object();
    private final List<Thread> claimThreads = new ArrayList<>();
    private final List<Thread> settleThreads = new ArrayList<>();
    private Sink sink;
    private volatile boolean claiming;
    private volatile boolean settling;

    HttpTaskSource(Worker worker, RdqClient client, List<String> queues, boolean withEnvelopes) {
        this.worker = worker;
        this.client = client;
        this.queues = queues;
        this.withEnvelopes = withEnvelopes;
    }

    @Override
    public void start(Sink sink) {
        this.sink = sink;
        claiming = true;
        settling = true;
        for (int i = 0; i < worker.settlers; i++) {
            Thread t = Worker.daemon("rdq-settler").newThread(this::settleLoop);
            settleThreads.add(t);
            t.start();
        }
        for (String q : queues) {
            for (int i = 0; i < worker.claimers; i++) {
                Thread t = Worker.daemon("rdq-claim-" + q).newThread(() -> claimLoop(q));
                claimThreads.add(t);
                t.start();
            }
        }
    }

    @Override
    public void settle(Leased task, Settle settle) {
        settles.add(settle);
    }

    @Override
    public void abandoned(Leased task) {
        // Nothing to give back: HTTP claims hold no credits.
    }

    @Override
    public CancelRequest extend(Leased task, long ms) {
        Envelope env = client.extendLease(task.id, task.leaseToken, ms);
        // Kept as history once a task finishes: only a running task's counts.
        return env.status() == Status.IN_FLIGHT ? env.cancelRequested().orElse(null) : null;
    }

    @Override
    public void stopClaiming() {
        claiming = false;
        synchronized (wake) {
            wake.notifyAll();
        }
        for (Thread t : claimThreads) {
            Worker.joinQuietly(t);
        }
    }

    @Override
    public void close() {
        settling = false;
        for (Thread t : settleThreads) {
            Worker.joinQuietly(t);
        }
    }

    // ------------------------------------------------------------------
    // Claiming

    private void claimLoop(String queue) {
        long backoffMs = 0;
        int claimBatch = worker.claimBatch;
        long pollMs = worker.pollInterval.toMillis();
        while (claiming) {
            try {
                if (!worker.slots.tryAcquire(pollMs, TimeUnit.MILLISECONDS)) {
                    continue;
                }
            } catch (InterruptedException e) {
                return;
            }
            int n = 1 + takeSlots(claimBatch - 1);
            // Under load, wait a moment for more free slots rather than
            // claiming one task at a time: one claim is one store transaction.
            for (int spin = 0; spin < 4 && n < claimBatch / 4 && worker.active.get() > 0; spin++) {
                pause(1);
                n += takeSlots(claimBatch - n);
            }
            List<ClaimedTask> claimed;
            try {
                claimed = client.claim(queue, n, worker.leaseMs);
                backoffMs = 0;
            } catch (RdqException e) {
                worker.slots.release(n);
                backoffMs = Math.min(5000, Math.max(backoffMs * 2, pollMs));
                LOG.log(System.Logger.Level.WARNING, "claim on " + queue + " failed: " + e.getMessage());
                pause(backoffMs);
                continue;
            }
            worker.slots.release(n - claimed.size());
            for (ClaimedTask c : claimed) {
                if (!claiming || !sink.accept(Leased.of(c, this))) {
                    // Claimed as the worker began to stop: handed back unrun.
                    settles.add(Settle.release(c.id(), c.leaseToken()));
                    worker.slots.release();
                }
            }
            if (claimed.isEmpty()) {
                pause(pollMs);
            }
        }
    }

    private int takeSlots(int max) {
        int n = 0;
        while (n < max && worker.slots.tryAcquire()) {
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
    // Settling

    private void settleLoop() {
        int max = worker.settleBatch;
        List<Settle> batch = new ArrayList<>(max);
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
            settles.drainTo(batch, max - 1);
            sendSettles(batch);
        }
    }

    private void sendSettles(List<Settle> batch) {
        long backoff = 50;
        for (int attempt = 1; ; attempt++) {
            try {
                for (SettleResult r : client.settle(batch, withEnvelopes)) {
                    worker.settled(r);
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
}
