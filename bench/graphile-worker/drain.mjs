// docs/benchmarks.md W1 (drain) on graphile-worker: add JOBS no-op jobs with 64
// `addJob` calls in flight, then work them with concurrency 64 and report
// jobs added/s and jobs worked/s (until the last one is deleted from the
// database, i.e. its completion committed). Run through run.sh.
//
// Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
// JOBS (20000), CONCURRENCY (64), SCHEMA (rdq_bench_graphile_worker),
// BATCHING ("on": the documented batching options, localQueue and batched
// completions; "off": graphile-worker's defaults), LOCAL_QUEUE_SIZE (500),
// QUIET (1: no logging; 0: graphile-worker's default logger, a line per job).
import { Logger, makeWorkerUtils, run } from "graphile-worker";
import pg from "pg";

const connectionString =
  process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const jobs = Number(process.env.JOBS ?? 20000);
const concurrency = Number(process.env.CONCURRENCY ?? 64);
const schema = process.env.SCHEMA ?? "rdq_bench_graphile_worker";
const batching = (process.env.BATCHING ?? "on") === "on";
// graphile-worker's performance page uses 500; its release notes suggest
// concurrency + 1.
const localQueueSize = Number(process.env.LOCAL_QUEUE_SIZE ?? 500);
const inFlight = 64;

// Silent by default (a line per job measures the terminal); QUIET=0 keeps
// graphile-worker's own logger, as an application would run it.
const quiet = (process.env.QUIET ?? "1") !== "0";
const logger = quiet ? new Logger(() => () => {}) : undefined;
const admin = new pg.Pool({ connectionString, max: 1 });
await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);

const utils = await makeWorkerUtils({
  connectionString,
  schema,
  ...(logger ? { logger } : {}),
});
await utils.migrate();

// About 100 bytes of JSON, as in `rdq bench`.
const payload = (i) => ({
  submitted_us: Number(process.hrtime.bigint() / 1000n),
  order_id: i,
  note: "graphile-worker bench no-op task, about one hundred bytes",
});

let next = 0;
const addStart = process.hrtime.bigint();
await Promise.all(
  Array.from({ length: inFlight }, async () => {
    while (next < jobs) {
      const i = next++;
      await utils.addJob("noop", payload(i));
    }
  }),
);
const addSeconds = Number(process.hrtime.bigint() - addStart) / 1e9;

const preset = {
  worker: {
    connectionString,
    schema,
    concurrentJobs: concurrency,
    maxPoolSize: concurrency + 1,
    pollInterval: 200,
    ...(batching
      ? {
          // The batching options of graphile-worker's performance page.
          localQueue: { size: localQueueSize },
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        }
      : {}),
  },
};

let worked = 0;
let allWorked;
const done = new Promise((resolve) => (allWorked = resolve));
const workStart = process.hrtime.bigint();
const runner = await run({
  preset,
  ...(logger ? { logger } : {}),
  noHandleSignals: true,
  taskList: {
    noop: async () => {
      worked += 1;
      if (worked === jobs) allWorked();
    },
  },
});
await done;
// Worked means completed in the database, as rdq counts a settle once committed.
for (;;) {
  const { rows } = await admin.query(
    `SELECT count(*)::int AS n FROM ${schema}._private_jobs`,
  );
  if (rows[0].n === 0) break;
  await new Promise((r) => setTimeout(r, 2));
}
const workSeconds = Number(process.hrtime.bigint() - workStart) / 1e9;
await runner.stop();
await utils.release();
await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
await admin.end();

console.log(
  JSON.stringify({
    peer: "graphile-worker",
    batching,
    quiet,
    local_queue_size: batching ? localQueueSize : null,
    jobs,
    concurrency,
    add_per_s: jobs / addSeconds,
    work_per_s: jobs / workSeconds,
  }),
);
