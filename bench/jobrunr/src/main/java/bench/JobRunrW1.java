package bench;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.jobrunr.configuration.JobRunr;
import org.jobrunr.jobs.states.StateName;
import org.jobrunr.scheduling.JobScheduler;
import org.jobrunr.server.BackgroundJobServer;
import org.jobrunr.server.BackgroundJobServerConfiguration;
import org.jobrunr.storage.StorageProvider;
import org.jobrunr.storage.sql.postgres.PostgresStorageProvider;
import org.jobrunr.utils.mapper.jackson.JacksonJsonMapper;

/**
 * W1 on JobRunr: 20,000 no-op jobs with ~100-byte payloads enqueued one call
 * at a time with 64 in flight, then worked by a BackgroundJobServer with 64
 * workers at the smallest poll interval JobRunr's SQL storage accepts (5 s).
 * Prints one JSON line.
 *
 * <p>Arguments: JDBC URL, jobs, warm-up jobs (0): a first, untimed round of
 * that many (enqueued and worked the same way) so the JIT has compiled the
 * hot paths, as in a service that has run for a while.
 */
public final class JobRunrW1 {
    static final AtomicInteger DONE = new AtomicInteger();

    private JobRunrW1() {}

    /** The job: does nothing with its payload. */
    public static void noop(String payload) {
        if (payload.isEmpty()) {
            throw new IllegalArgumentException("empty payload");
        }
        DONE.incrementAndGet();
    }

    public static void main(String[] args) throws Exception {
        String jdbc = args.length > 0 ? args[0] : "jdbc:postgresql://127.0.0.1:5432/test?user=postgres";
        int jobs = args.length > 1 ? Integer.parseInt(args[1]) : 20_000;
        int warmup = args.length > 2 ? Integer.parseInt(args[2]) : 0;
        String schema = "jobrunr_bench";

        HikariConfig hc = new HikariConfig();
        hc.setJdbcUrl(jdbc + "&currentSchema=" + schema);
        hc.setMaximumPoolSize(80);
        try (HikariDataSource ds = new HikariDataSource(hc)) {
            try (Connection c = ds.getConnection(); Statement s = c.createStatement()) {
                s.execute("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
                s.execute("CREATE SCHEMA " + schema);
            }
            StorageProvider storage = new PostgresStorageProvider(ds);
            JacksonJsonMapper mapper = new JacksonJsonMapper();
            JobScheduler scheduler = JobRunr.configure()
                    .useJsonMapper(mapper)
                    .useStorageProvider(storage)
                    .initialize()
                    .getJobScheduler();

            if (warmup > 0) {
                round(scheduler, storage, mapper, warmup, 0);
            }
            double[] r = round(scheduler, storage, mapper, jobs, warmup);
            double submitSecs = r[0];
            double workSecs = r[1];
            System.out.printf("{\"system\":\"jobrunr\",\"jobs\":%d,\"submit_secs\":%.3f,\"submits_per_sec\":%.0f,"
                    + "\"work_secs\":%.3f,\"worked_per_sec\":%.0f,\"executions\":%d,\"warmup_jobs\":%d}%n",
                    jobs, submitSecs, jobs / submitSecs, workSecs, jobs / workSecs, DONE.get() - warmup, warmup);
            System.exit(0);
        }
    }

    /**
     * Enqueues {@code jobs} jobs with 64 in flight, then works them with a
     * fresh BackgroundJobServer of 64 workers until {@code before + jobs}
     * jobs have succeeded; answers {submit secs, work secs}.
     */
    static double[] round(JobScheduler scheduler, StorageProvider storage, JacksonJsonMapper mapper, int jobs, int before) throws Exception {
        int inFlight = 64;
        int workers = 64;
        ExecutorService pool = Executors.newFixedThreadPool(inFlight);
        long t0 = System.nanoTime();
        List<Future<?>> futures = new ArrayList<>(inFlight);
        AtomicInteger next = new AtomicInteger();
        for (int t = 0; t < inFlight; t++) {
            futures.add(pool.submit(() -> {
                int i;
                while ((i = next.getAndIncrement()) < jobs) {
                    String payload = Payloads.json(i);
                    scheduler.enqueue(() -> JobRunrW1.noop(payload));
                }
            }));
        }
        for (Future<?> f : futures) {
            f.get();
        }
        double submitSecs = (System.nanoTime() - t0) / 1e9;
        pool.shutdown();

        BackgroundJobServerConfiguration cfg = BackgroundJobServerConfiguration
                .usingStandardBackgroundJobServerConfiguration()
                .andWorkerCount(workers)
                .andPollInterval(Duration.ofSeconds(5));
        BackgroundJobServer server = new BackgroundJobServer(storage, mapper, null, cfg);
        long t1 = System.nanoTime();
        server.start();
        while (storage.countJobs(StateName.SUCCEEDED) < before + jobs) {
            Thread.sleep(20);
        }
        double workSecs = (System.nanoTime() - t1) / 1e9;
        server.stop();
        return new double[] {submitSecs, workSecs};
    }
}
