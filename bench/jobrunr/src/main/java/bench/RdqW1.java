package bench;

import dev.rdq.client.QueueCounts;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.worker.Worker;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * W1 through the rdq Java SDK: 20,000 no-op tasks with ~100-byte JSON
 * payloads submitted one call at a time with 64 in flight, then worked by a
 * {@link Worker} with concurrency 64 until every task is SUCCEEDED on the
 * server. Prints one JSON line.
 */
public final class RdqW1 {
    private RdqW1() {}

    public static void main(String[] args) throws Exception {
        String url = args.length > 0 ? args[0] : "http://127.0.0.1:7490";
        int jobs = args.length > 1 ? Integer.parseInt(args[1]) : 20_000;
        int claimers = args.length > 2 ? Integer.parseInt(args[2]) : 2;
        int concurrency = args.length > 3 ? Integer.parseInt(args[3]) : 64;
        String queue = "w1-java-" + Long.toString(System.currentTimeMillis(), 36);
        RdqClient client = RdqClient.builder(url).build();

        Semaphore slots = new Semaphore(64);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long t0 = System.nanoTime();
        CompletableFuture<?>[] all = new CompletableFuture<?>[jobs];
        for (int i = 0; i < jobs; i++) {
            slots.acquire();
            SubmitRequest r = SubmitRequest.builder(queue, "noop").payloadJson(Payloads.json(i)).build();
            CompletableFuture<Envelope> f = client.submitAsync(r);
            all[i] = f.whenComplete((e, t) -> {
                if (t != null) {
                    failure.compareAndSet(null, t);
                }
                slots.release();
            });
        }
        CompletableFuture.allOf(all).exceptionally(t -> null).join();
        double submitSecs = (System.nanoTime() - t0) / 1e9;
        if (failure.get() != null) {
            throw new IllegalStateException("a submit failed", failure.get());
        }

        AtomicInteger ran = new AtomicInteger();
        long t1 = System.nanoTime();
        Worker w = Worker.builder(client)
                .concurrency(concurrency)
                .claimBatch(64)
                .claimers(claimers)
                .pollInterval(Duration.ofMillis(20))
                .handler(queue, "noop", task -> ran.incrementAndGet())
                .start();
        while (succeeded(client, queue) < jobs) {
            Thread.sleep(ran.get() < jobs ? 50 : 5);
        }
        double workSecs = (System.nanoTime() - t1) / 1e9;
        w.close();
        System.out.printf("{\"system\":\"rdq-java-sdk\",\"jobs\":%d,\"submit_secs\":%.3f,\"submits_per_sec\":%.0f,"
                + "\"work_secs\":%.3f,\"worked_per_sec\":%.0f,\"executions\":%d,\"virtual_threads\":%b,\"claimers\":%d,\"concurrency\":%d}%n",
                jobs, submitSecs, jobs / submitSecs, workSecs, jobs / workSecs, ran.get(), w.usesVirtualThreads(), claimers, concurrency);
        System.exit(0);
    }

    static long succeeded(RdqClient client, String queue) {
        for (QueueCounts q : client.queues()) {
            if (q.queue().equals(queue)) {
                return q.succeeded();
            }
        }
        return 0;
    }
}
