package dev.rdq.client;

import dev.rdq.RdqException;
import dev.rdq.envelope.EnvelopeException;
import dev.rdq.envelope.Names;
import dev.rdq.json.JsonWriter;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.Base64;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * A periodic schedule ({@code docs/schedules.md}): which task to submit, and
 * when — a cron pattern read on a time zone's wall clock, or a fixed
 * interval. Immutable: {@link #cron} and {@link #every} make one with every
 * other field at its default, and the {@code with…} methods answer a copy
 * with one field changed.
 *
 * <pre>{@code
 * Schedule nightly = Schedule.cron("nightly.report", "30 2 * * *",
 *                 ScheduleTask.builder("reports", "build-report").payloadJson("{\"days\":1}").build())
 *         .withZone("Europe/London")
 *         .withOverlap(Schedule.Overlap.SKIP_IF_UNFINISHED)
 *         .withCatchUp(Schedule.CatchUp.all(10, Duration.ofHours(1)));
 * }</pre>
 *
 * <p>The name is checked when the schedule is made ({@code
 * INVALID_SCHEDULE_NAME}: 1–240 bytes of {@code [a-z0-9._-]}, not {@code .}
 * or {@code ..}); the pattern, the zone and the bounds are checked by the
 * server when the schedule is put ({@code INVALID_CRON}, {@code
 * UNKNOWN_TIME_ZONE}, {@code INVALID_INTERVAL}, {@code INVALID_WINDOW}), the
 * one authority on them. Values the wire cannot carry (a negative or
 * fractional-millisecond interval) are refused here with the server's code.
 */
public final class Schedule {
    /** The zone a schedule without one runs in. */
    public static final String DEFAULT_TIME_ZONE = "UTC";
    /** The code of a bad schedule name, the server's. */
    public static final String INVALID_SCHEDULE_NAME = "INVALID_SCHEDULE_NAME";

    private final String name;
    private final ScheduleTask task;
    private final String cron;
    private final Duration every;
    private final String tz;
    private final Instant start;
    private final Instant end;
    private final boolean paused;
    private final Overlap overlap;
    private final CatchUp catchUp;

    private Schedule(String name, ScheduleTask task, String cron, Duration every, String tz, Instant start, Instant end,
            boolean paused, Overlap overlap, CatchUp catchUp) {
        this.name = name;
        this.task = task;
        this.cron = cron;
        this.every = every;
        this.tz = tz;
        this.start = start;
        this.end = end;
        this.paused = paused;
        this.overlap = overlap;
        this.catchUp = catchUp;
    }

    /**
     * A schedule {@code name} submitting {@code task} at the times the cron
     * {@code pattern} matches (5 fields, or 6 with leading seconds, or a
     * shorthand such as {@code @daily}), in UTC until {@link #withZone}.
     */
    public static Schedule cron(String name, String pattern, ScheduleTask task) {
        checkName(name);
        return new Schedule(name, Objects.requireNonNull(task, "task"), Objects.requireNonNull(pattern, "pattern"), null,
                DEFAULT_TIME_ZONE, null, null, false, Overlap.ALLOW, CatchUp.latest());
    }

    /**
     * A schedule {@code name} submitting {@code task} every {@code period} of
     * elapsed time, anchored at {@link #withStart start} or else at the Unix
     * epoch; whole milliseconds, 1 ms to 366 days.
     */
    public static Schedule every(String name, Duration period, ScheduleTask task) {
        checkName(name);
        return new Schedule(name, Objects.requireNonNull(task, "task"), null, wholeMillis(period, "spec.every_ms",
                "INVALID_INTERVAL"), DEFAULT_TIME_ZONE, null, null, false, Overlap.ALLOW, CatchUp.latest());
    }

    public String name() {
        return name;
    }

    /** The task each fire submits. */
    public ScheduleTask task() {
        return task;
    }

    /** The cron pattern; empty for an interval. */
    public Optional<String> cronPattern() {
        return Optional.ofNullable(cron);
    }

    /** The interval; empty for a cron pattern. */
    public Optional<Duration> every() {
        return Optional.ofNullable(every);
    }

    /** The IANA zone a cron pattern is read in (default {@value #DEFAULT_TIME_ZONE}; intervals ignore it). */
    public String timeZone() {
        return tz;
    }

    /** No due time before this instant (inclusive); an interval's anchor. */
    public Optional<Instant> start() {
        return Optional.ofNullable(start);
    }

    /** No due time after this instant (inclusive). */
    public Optional<Instant> end() {
        return Optional.ofNullable(end);
    }

    /** A paused schedule submits nothing; the due times it passes are skipped. */
    public boolean paused() {
        return paused;
    }

    public Overlap overlap() {
        return overlap;
    }

    public CatchUp catchUp() {
        return catchUp;
    }

    /** This schedule under another name. */
    public Schedule withName(String name) {
        checkName(name);
        return new Schedule(name, task, cron, every, tz, start, end, paused, overlap, catchUp);
    }

    /** This schedule submitting {@code task}. */
    public Schedule withTask(ScheduleTask task) {
        return new Schedule(name, Objects.requireNonNull(task, "task"), cron, every, tz, start, end, paused, overlap,
                catchUp);
    }

    /** This schedule with its cron pattern read in the IANA zone {@code tz} ({@code Europe/London}). */
    public Schedule withZone(String tz) {
        return new Schedule(name, task, cron, every, Objects.requireNonNull(tz, "tz"), start, end, paused, overlap,
                catchUp);
    }

    /** This schedule with no due time before {@code start} (whole milliseconds; null: none). */
    public Schedule withStart(Instant start) {
        return new Schedule(name, task, cron, every, tz, millis(start, "start_ms"), end, paused, overlap, catchUp);
    }

    /** This schedule with no due time after {@code end} (whole milliseconds; null: none). */
    public Schedule withEnd(Instant end) {
        return new Schedule(name, task, cron, every, tz, start, millis(end, "end_ms"), paused, overlap, catchUp);
    }

    /** This schedule, paused or not. */
    public Schedule withPaused(boolean paused) {
        return new Schedule(name, task, cron, every, tz, start, end, paused, overlap, catchUp);
    }

    /** This schedule with the overlap policy {@code overlap}. */
    public Schedule withOverlap(Overlap overlap) {
        return new Schedule(name, task, cron, every, tz, start, end, paused, Objects.requireNonNull(overlap, "overlap"),
                catchUp);
    }

    /** This schedule with the catch-up policy {@code catchUp}. */
    public Schedule withCatchUp(CatchUp catchUp) {
        return new Schedule(name, task, cron, every, tz, start, end, paused, overlap,
                Objects.requireNonNull(catchUp, "catchUp"));
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Schedule s && name.equals(s.name) && task.equals(s.task) && Objects.equals(cron, s.cron)
                && Objects.equals(every, s.every) && tz.equals(s.tz) && Objects.equals(start, s.start)
                && Objects.equals(end, s.end) && paused == s.paused && overlap == s.overlap && catchUp.equals(s.catchUp);
    }

    @Override
    public int hashCode() {
        return Objects.hash(name, task, cron, every, tz, start, end, paused, overlap, catchUp);
    }

    @Override
    public String toString() {
        return "Schedule[name=" + name + ", " + (cron != null ? "cron=" + cron : "every=" + every) + ", tz=" + tz
                + (start == null ? "" : ", start=" + start) + (end == null ? "" : ", end=" + end) + ", paused=" + paused
                + ", overlap=" + overlap + ", catchUp=" + catchUp + ", task=" + task + "]";
    }

    /** The schedule's JSON, every default written out, as {@code PUT /v1/schedules/{name}} takes it. */
    byte[] toJson() {
        JsonWriter w = new JsonWriter(256 + task.payload().length * 4 / 3);
        w.startObject();
        w.key("name").string(name);
        w.key("task").startObject();
        w.key("queue").string(task.queue());
        w.key("handler_ref").string(task.handlerRef());
        byte[] payload = task.payload();
        if (payload.length > 0) {
            w.key("payload").string(Base64.getEncoder().encodeToString(payload));
        }
        w.key("payload_content_type").string(task.payloadContentType());
        if (!task.headers().isEmpty()) {
            w.key("headers").startObject();
            for (Map.Entry<String, String> h : task.headers().entrySet()) {
                w.key(h.getKey()).string(h.getValue());
            }
            w.endObject();
        }
        w.key("priority").number(task.priority());
        if (task.flowKey().isPresent()) {
            w.key("flow_key").string(task.flowKey().get());
        }
        w.endObject();
        w.key("spec").startObject();
        if (cron != null) {
            w.key("cron").string(cron);
        } else {
            w.key("every_ms").number(every.toMillis());
        }
        w.endObject();
        w.key("tz").string(tz);
        if (start != null) {
            w.key("start_ms").number(start.toEpochMilli());
        }
        if (end != null) {
            w.key("end_ms").number(end.toEpochMilli());
        }
        w.key("paused").bool(paused);
        w.key("overlap").string(overlap.wire());
        if (catchUp instanceof CatchUp.All all) {
            w.key("catch_up").startObject().key("all").startObject();
            w.key("max").number(all.max());
            w.key("window_ms").number(all.window().toMillis());
            w.endObject().endObject();
        } else {
            w.key("catch_up").string(catchUp instanceof CatchUp.Skip ? "skip" : "latest");
        }
        w.endObject();
        return w.toByteArray();
    }

    /** The schedule a read answered, its fields as the server wrote them. */
    static Schedule of(String name, ScheduleTask task, String cron, Duration every, String tz, Instant start,
            Instant end, boolean paused, Overlap overlap, CatchUp catchUp) {
        return new Schedule(name, task, cron, every, tz, start, end, paused, overlap, catchUp);
    }

    /**
     * Refuses a bad schedule name with {@code INVALID_SCHEDULE_NAME} naming
     * {@code name}, before any request: the rule of queue names, with the
     * schedule's code (as the server checks it).
     */
    static void checkName(String name) {
        Objects.requireNonNull(name, "name");
        try {
            Names.validateQueueName(name);
        } catch (EnvelopeException e) {
            throw new RdqException(INVALID_SCHEDULE_NAME, "name", e.detail());
        }
    }

    private static Duration wholeMillis(Duration d, String field, String code) {
        Objects.requireNonNull(d, field);
        if (d.isNegative() || d.getNano() % 1_000_000 != 0) {
            throw new RdqException(code, field, d + " is not a positive whole number of milliseconds");
        }
        try {
            d.toMillis();
        } catch (ArithmeticException e) {
            throw new RdqException(code, field, d + " is too long", 0, e);
        }
        return d;
    }

    private static Instant millis(Instant t, String field) {
        if (t == null) {
            return null;
        }
        try {
            t.toEpochMilli();
        } catch (ArithmeticException e) {
            throw new RdqException("INVALID_WINDOW", field, t + " lies outside the years 0000-9999", 0, e);
        }
        return t.truncatedTo(ChronoUnit.MILLIS);
    }

    /** What a fire does while the previous fire's task has not finished ({@code docs/schedules.md}, "Overlap"). */
    public enum Overlap {
        /** Submit regardless, as cron does (the default). */
        ALLOW,
        /** Skip while the previous task waits to be claimed. */
        SKIP_IF_PENDING,
        /** Skip while the previous task is being worked on. */
        SKIP_IF_RUNNING,
        /** Skip while the previous task is waiting or being worked on. */
        SKIP_IF_UNFINISHED;

        /** The policy's JSON name ({@code skip_if_running}). */
        public String wire() {
            return name().toLowerCase(Locale.ROOT);
        }

        /** The policy of a JSON name; empty for one this SDK does not know. */
        public static Optional<Overlap> fromWire(String s) {
            for (Overlap o : values()) {
                if (o.wire().equals(s)) {
                    return Optional.of(o);
                }
            }
            return Optional.empty();
        }
    }

    /**
     * What a tick does with due times missed while no node was ticking
     * ({@code docs/schedules.md}, "Catch-up"): {@link #skip()}, {@link
     * #latest()} (the default) or {@link #all(int, Duration)}.
     */
    public sealed interface CatchUp permits CatchUp.Skip, CatchUp.Latest, CatchUp.All {
        /** Submit a due time only if it is on time; skip the rest. */
        static CatchUp skip() {
            return new Skip();
        }

        /** Submit the most recent missed due time however late; skip older ones (the default). */
        static CatchUp latest() {
            return new Latest();
        }

        /**
         * Submit every missed due time within {@code window} of now, at most
         * {@code max} of them, the newest (the server takes {@code max} 1 to
         * 1,000 and {@code window} 1 ms to 366 days, {@code INVALID_WINDOW}).
         */
        static CatchUp all(int max, Duration window) {
            return new All(max, window);
        }

        /** {@link CatchUp#skip()}. */
        record Skip() implements CatchUp {}

        /** {@link CatchUp#latest()}. */
        record Latest() implements CatchUp {}

        /** {@link CatchUp#all(int, Duration)}. */
        record All(int max, Duration window) implements CatchUp {
            public All {
                if (max < 0) {
                    throw new RdqException("INVALID_WINDOW", "catch_up.all.max", max + " is outside 1 to 1000");
                }
                wholeMillis(window, "catch_up.all.window_ms", "INVALID_WINDOW");
            }
        }
    }
}
