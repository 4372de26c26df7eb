package dev.rdq.client;

import static dev.rdq.client.AnswerReads.optionalString;
import static dev.rdq.client.AnswerReads.unexpected;

import dev.rdq.RdqException;
import dev.rdq.json.JsonNull;
import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonString;
import dev.rdq.json.JsonValue;
import java.time.Duration;
import java.time.Instant;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * A stored schedule with its firing state, as every read answers it
 * ({@code GET /v1/schedules/{name}}, {@code docs/http-api.md}, "Schedules").
 *
 * @param name the schedule's name
 * @param schedule the definition as stored, every default written out
 * @param owner who put it last: {@link ScheduleOwner#API} or {@link ScheduleOwner#CODE}
 * @param createdAt when it was first put
 * @param updatedAt when it was last put (or paused, resumed)
 * @param lastDue the last due time accounted for, submitted or skipped
 * @param lastFireAt when the last fire that submitted a task ran
 * @param lastFiredTask the id of that fire's task
 * @param nextDue the next due time, if there is one
 * @param fires tasks submitted over the schedule's life (runs asked with {@code runSchedule} not counted)
 * @param skips skipped due times by reason ({@code paused}, {@code catch_up_skip}, {@code overlap_running}, …)
 */
public record ScheduleState(String name, Schedule schedule, ScheduleOwner owner, Instant createdAt, Instant updatedAt,
        Optional<Instant> lastDue, Optional<Instant> lastFireAt, Optional<String> lastFiredTask,
        Optional<Instant> nextDue, long fires, Map<String, Long> skips) {

    public ScheduleState {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(schedule, "schedule");
        Objects.requireNonNull(owner, "owner");
        Objects.requireNonNull(createdAt, "createdAt");
        Objects.requireNonNull(updatedAt, "updatedAt");
        Objects.requireNonNull(lastDue, "lastDue");
        Objects.requireNonNull(lastFireAt, "lastFireAt");
        Objects.requireNonNull(lastFiredTask, "lastFiredTask");
        Objects.requireNonNull(nextDue, "nextDue");
        skips = Collections.unmodifiableMap(new LinkedHashMap<>(skips));
    }

    /** True when the schedule is paused. */
    public boolean paused() {
        return schedule.paused();
    }

    // ------------------------------------------------------------------
    // Reading the server's JSON. Members this SDK does not know are ignored,
    // so a newer server may add some.

    /** A {@code ScheduleState} document. */
    static ScheduleState fromJson(JsonObject o) {
        String name = str(o, "name");
        Schedule schedule = scheduleOf(object(o, "schedule"));
        String ownerText = str(o, "owner");
        ScheduleOwner owner = ScheduleOwner.fromWire(ownerText)
                .orElseThrow(() -> unexpected("owner \"" + ownerText + "\" is neither api nor code"));
        Map<String, Long> skips = new LinkedHashMap<>();
        object(o, "skips").members().forEach((reason, n) -> skips.put(reason, integer(n, "skips." + reason)));
        return new ScheduleState(name, schedule, owner, time(o, "created_at_ms").orElseThrow(() -> missing("created_at_ms")),
                time(o, "updated_at_ms").orElseThrow(() -> missing("updated_at_ms")), time(o, "last_due_ms"),
                time(o, "last_fire_at_ms"), optionalString(o, "last_fired_task"), time(o, "next_due_ms"),
                integer(o.get("fires").orElseThrow(() -> missing("fires")), "fires"), skips);
    }

    /** The {@code Schedule} document of a read. */
    static Schedule scheduleOf(JsonObject o) {
        JsonObject t = object(o, "task");
        ScheduleTask task;
        try {
            ScheduleTask.Builder b = ScheduleTask.builder(str(t, "queue"), str(t, "handler_ref"));
            Optional<String> payload = optionalString(t, "payload");
            if (payload.isPresent()) {
                b.payload(Base64.getDecoder().decode(payload.get()));
            }
            b.payloadContentType(optionalString(t, "payload_content_type").orElse(ScheduleTask.DEFAULT_CONTENT_TYPE));
            JsonValue headers = t.get("headers").orElse(JsonNull.INSTANCE);
            if (headers instanceof JsonObject h) {
                h.members().forEach((k, v) -> b.header(k, v instanceof JsonString s ? s.value() : v.toJson()));
            }
            b.priority((int) t.get("priority").map(v -> integer(v, "task.priority")).orElse(0L).longValue());
            optionalString(t, "flow_key").ifPresent(b::flowKey);
            task = b.build();
        } catch (IllegalArgumentException | RdqException e) {
            if (e instanceof RdqException r && RdqException.UNEXPECTED_RESPONSE.equals(r.code())) {
                throw r;
            }
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, null,
                    "the server answered a schedule's task this SDK refuses: " + e.getMessage(), 0, e);
        }
        JsonObject spec = object(o, "spec");
        String cron = optionalString(spec, "cron").orElse(null);
        Duration every = spec.get("every_ms").map(v -> Duration.ofMillis(integer(v, "spec.every_ms"))).orElse(null);
        if ((cron == null) == (every == null)) {
            throw unexpected("a schedule's spec is neither a cron pattern nor an interval: " + spec.toJson());
        }
        String overlapText = optionalString(o, "overlap").orElse("allow");
        Schedule.Overlap overlap = Schedule.Overlap.fromWire(overlapText)
                .orElseThrow(() -> unexpected("unknown overlap policy \"" + overlapText + "\""));
        return Schedule.of(str(o, "name"), task, cron, every, optionalString(o, "tz").orElse(Schedule.DEFAULT_TIME_ZONE),
                time(o, "start_ms").orElse(null), time(o, "end_ms").orElse(null),
                o.get("paused").map(v -> v.toJson().equals("true")).orElse(false), overlap, catchUpOf(o));
    }

    private static Schedule.CatchUp catchUpOf(JsonObject o) {
        JsonValue v = o.get("catch_up").orElse(JsonNull.INSTANCE);
        if (v == JsonNull.INSTANCE) {
            return Schedule.CatchUp.latest();
        }
        if (v instanceof JsonString s && s.value().equals("skip")) {
            return Schedule.CatchUp.skip();
        }
        if (v instanceof JsonString s && s.value().equals("latest")) {
            return Schedule.CatchUp.latest();
        }
        if (v instanceof JsonObject c && c.get("all").orElse(null) instanceof JsonObject all) {
            long max = integer(all.get("max").orElseThrow(() -> missing("catch_up.all.max")), "catch_up.all.max");
            long window = integer(all.get("window_ms").orElseThrow(() -> missing("catch_up.all.window_ms")),
                    "catch_up.all.window_ms");
            return Schedule.CatchUp.all((int) Math.min(max, Integer.MAX_VALUE), Duration.ofMillis(window));
        }
        throw unexpected("unknown catch-up policy " + v.toJson());
    }

    private static Optional<Instant> time(JsonObject o, String key) {
        JsonValue v = o.get(key).orElse(JsonNull.INSTANCE);
        return v == JsonNull.INSTANCE ? Optional.empty() : Optional.of(Instant.ofEpochMilli(integer(v, key)));
    }

    private static long integer(JsonValue v, String key) {
        if (v instanceof JsonNumber n && n.isIntegral()) {
            try {
                return n.longValueExact();
            } catch (ArithmeticException e) {
                // Reported below.
            }
        }
        throw unexpected("expected an integer \"" + key + "\", not " + v.toJson());
    }

    private static String str(JsonObject o, String key) {
        return optionalString(o, key).orElseThrow(() -> missing(key));
    }

    private static JsonObject object(JsonObject o, String key) {
        if (o.get(key).orElse(null) instanceof JsonObject v) {
            return v;
        }
        throw unexpected("expected an object \"" + key + "\"");
    }

    private static RdqException missing(String key) {
        return unexpected("a schedule without \"" + key + "\"");
    }

}
