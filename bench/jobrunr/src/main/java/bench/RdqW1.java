package bench;

import dev.rdq.client.QueueCounts;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * W1 through the rdq Java SDK: 20,000 no-op tasks with ~100-byte JSON
 * payloads submitted one call at a time with 64 in flight, then worked by a
 * {@link Worker} with concurrency 64 until every task is SUCCEEDED on the
 * server. Prints one JSON line.
 *
 * <p>Arguments: URL, jobs, claim loops (2), concurrency (64), warm-up
 * jobs (0): a first, untimed round of that many on another queue, the
 * worker transport ({@code auto}, {@code grpc} or {@code http}) and, for
 * gRPC, the Work streams (1). The handler takes the payload bytes.
 */
public final class RdqW1 {
    private RdqW1() {}

    public static void main(String[] args) throws Exception {
        String url = args.length > 0 ? args[0] : "http://127.0.0.1:7490";
        int jobs = args.length > 1 ? Integer.parseInt(args[1]) : 20_000;
        int claimers = args.length > 2 ? Integer.parseInt(args[2]) : 2;
        int concurrency = args.length > 3 ? Integer.parseInt(args[3]) : 64;
        int warmup = args.length > 4 ? Integer.parseInt(args[4]) : 0;
        WorkerTransport transport = args.length > 5 ? WorkerTransport.valueOf(args[5].toUpperCase(java.util.Locale.ROOT))
                : WorkerTransport.AUTO;
        int streams = args.length > 6 ? Integer.parseInt(args[6]) : 1;
        String base = "w1-java-" + Long.toString(System.currentTimeMillis(), 36);
        RdqClient.Builder cb = RdqClient.builder(url);
        String submitProtocol = System.getenv("SUBMIT_PROTOCOL");
        if (submitProtocol != null && !submitProtocol.isEmpty()) {
            cb.submitProtocol(dev.rdq.client.SubmitProtocol.valueOf(submitProtocol.toUpperCase(java.util.Locale.ROOT)));
        }
        RdqClient client = cb.build();
        if (warmup > 0) {
            // An untimed round first, so the JIT has compiled the hot paths.
            round(client, base + "-warmup", warmup, claimers, concurrency, transport, streams);
        }
        double[] r = round(client, base, jobs, claimers, concurrency, transport, streams);
        System.out.printf("{\"system\":\"rdq-java-sdk\",\"jobs\":%d,\"submit_secs\":%.3f,\"submits_per_sec\":%.0f,"
                + "\"work_secs\":%.3f,\"worked_per_sec\":%.0f,\"executions\":%d,\"virtual_threads\":%b,\"claimers\":%d,"
                + "\"concurrency\":%d,\"warmup_jobs\":%d,\"work_cpu_us_per_task\":%.1f,\"java\":\"%s\","
                + "\"transport\":\"%s\",\"streams\":%d,\"submit_cpu_us_per_task\":%.1f}%n",
                jobs, r[0], jobs / r[0], r[1], jobs / r[1], (long) r[2], r[3] > 0, claimers, concurrency, warmup, r[4] * 1e6 / jobs,
                System.getProperty("java.version"), r[5] > 0 ? "grpc" : "http", streams, r[6] * 1e6 / jobs);
        System.exit(0);
    }

    /** This JVM's CPU time so far (every thread: JIT and GC included). */
    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    /** One W1 round on {@code queue}: submit, then work; answers {submit secs, work secs, executions, virtual threads, work CPU secs,
     * gRPC worker (1) or not (0), submit CPU secs}. */
    static double[] round(RdqClient client, String queue, int jobs, int claimers, int concurrency,
            WorkerTransport transport, int streams) throws Exception {
        // PAUSED_START=1: submit to a paused queue, start the worker, and time
        // from resuming it, as rdq bench --workload pull does.
        boolean pausedStart = "1".equals(System.getenv("PAUSED_START"));
        if (pausedStart) {
            client.updateQueueConfig(queue, paused(true));
        }
        Semaphore slots = new Semaphore(64);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long cpu0 = cpuNanos();
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
        double submitCpu = (cpuNanos() - cpu0) / 1e9;
        if (failure.get() != null) {
            throw new IllegalStateException("a submit failed", failure.get());
        }

        AtomicInteger ran = new AtomicInteger();
        CountDownLatch allRan = new CountDownLatch(1);
        System.err.println("rdq-w1: working " + queue);
        long cpu1 = cpuNanos();
        long t1 = System.nanoTime();
        Worker w = Worker.builder(client)
                .concurrency(concurrency)
                .claimBatch(64)
                .claimers(claimers)
                .pollInterval(Duration.ofMillis(20))
                .transport(transport)
                .streams(streams)
                .handler(queue, "noop", byte[].class, payload -> {
                    if (ran.incrementAndGet() == jobs) {
                        allRan.countDown();
                    }
                })
                .start();
        if (pausedStart) {
            Thread.sleep(300); // the worker's streams open
            cpu1 = cpuNanos();
            t1 = System.nanoTime();
            client.updateQueueConfig(queue, paused(false));
        }
        // Every handler has run; then the last settles reach the server.
        allRan.await();
        while (succeeded(client, queue) < jobs) {
            Thread.sleep(2);
        }
        double workSecs = (System.nanoTime() - t1) / 1e9;
        double workCpu = (cpuNanos() - cpu1) / 1e9;
        w.close();
        return new double[] {submitSecs, workSecs, ran.get(), w.usesVirtualThreads() ? 1 : 0, workCpu,
            w.transport() == WorkerTransport.GRPC ? 1 : 0, submitCpu};
    }

    static dev.rdq.json.JsonObject paused(boolean paused) {
        return dev.rdq.json.JsonObject.of(java.util.Map.of("paused", dev.rdq.json.JsonBoolean.of(paused)));
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
