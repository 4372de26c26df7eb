// docs/benchmarks.md W1 (drain) on BullMQ: add JOBS no-op jobs (about 100 bytes of
// JSON each) with 64 `queue.add` calls in flight, then work them with one
// Worker of concurrency 64, and report jobs added/s and jobs worked/s
// (until the last job's completion was written). BullMQ's defaults
// throughout (completed jobs are kept, as rdq keeps SUCCEEDED tasks); the
// queue is obliterated afterwards. Prints one JSON line. Run through run.sh.
//
// Environment: REDIS_URL (default redis://127.0.0.1:6379), JOBS (20000),
// CONCURRENCY (64).
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const jobs = Number(process.env.JOBS ?? 20000);
const concurrency = Number(process.env.CONCURRENCY ?? 64);
const inFlight = 64;
const name = `rdq-bench-${Date.now()}`;
const connection = () => new IORedis(url, { maxRetriesPerRequest: null });

const payload = (i) => ({
  submitted_us: Number(process.hrtime.bigint() / 1000n),
  order_id: i,
  note: "bullmq bench no-op task, about one hundred bytes of json",
});

const queue = new Queue(name, { connection: connection() });
await queue.waitUntilReady();

let next = 0;
const addStart = process.hrtime.bigint();
await Promise.all(
  Array.from({ length: inFlight }, async () => {
    while (next < jobs) {
      const i = next++;
      await queue.add("noop", payload(i));
    }
  }),
);
const addSeconds = Number(process.hrtime.bigint() - addStart) / 1e9;

let worked = 0;
let allWorked;
const done = new Promise((resolve) => (allWorked = resolve));
const workStart = process.hrtime.bigint();
const worker = new Worker(name, async () => {}, {
  connection: connection(),
  concurrency,
});
worker.on("completed", () => {
  worked += 1;
  if (worked === jobs) allWorked();
});
await done;
const workSeconds = Number(process.hrtime.bigint() - workStart) / 1e9;
await worker.close();
await queue.obliterate({ force: true });
await queue.close();

console.log(
  JSON.stringify({
    peer: "bullmq",
    version: "6.7.0",
    workload: "drain",
    jobs,
    concurrency,
    submits_per_s: Math.round(jobs / addSeconds),
    worked_per_s: Math.round(jobs / workSeconds),
    submit_s: Number(addSeconds.toFixed(3)),
    work_s: Number(workSeconds.toFixed(3)),
  }),
);
process.exit(0);
