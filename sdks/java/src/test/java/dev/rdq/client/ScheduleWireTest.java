package dev.rdq.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** The schedules' wire: the body and query a put sends, and the reading of the server's documents. */
class ScheduleWireTest {
    /** Answers every request with {@code status} and {@code answer}, remembering the last request. */
    static final class Canned implements Transport {
        final int status;
        final String answer;
        volatile Request last;
        int requests;

        Canned(int status, String answer) {
            this.status = status;
            this.answer = answer;
        }

        @Override
        public Response send(Request r) {
            last = r;
            requests++;
            return new Response(status, answer.getBytes(StandardCharsets.UTF_8));
        }

        @Override
        public StreamedResponse open(Request r) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void close() {}

        String body() {
            return new String(last.body(), StandardCharsets.UTF_8);
        }
    }

    static RdqClient client(Canned t) {
        return RdqClient.builder("http://rdq.invalid").transport(t).build();
    }

    static final Schedule FULL = Schedule.cron("nightly.report", "30 2 * * *",
                    ScheduleTask.builder("reports", "build-report").payloadJson("{\"days\":1}").header("team", "data")
                            .priority(5).flowKey("tenant-42").build())
            .withZone("Europe/London").withStart(Instant.ofEpochMilli(1767225600000L))
            .withEnd(Instant.ofEpochMilli(1798761599999L)).withOverlap(Schedule.Overlap.SKIP_IF_UNFINISHED)
            .withCatchUp(Schedule.CatchUp.all(10, Duration.ofHours(1)));

    static final String FULL_JSON = "{\"name\":\"nightly.report\",\"task\":{\"queue\":\"reports\","
            + "\"handler_ref\":\"build-report\",\"payload\":\"eyJkYXlzIjoxfQ==\","
            + "\"payload_content_type\":\"application/json\",\"headers\":{\"team\":\"data\"},\"priority\":5,"
            + "\"flow_key\":\"tenant-42\"},\"spec\":{\"cron\":\"30 2 * * *\"},\"tz\":\"Europe/London\","
            + "\"start_ms\":1767225600000,\"end_ms\":1798761599999,\"paused\":false,\"overlap\":\"skip_if_unfinished\","
            + "\"catch_up\":{\"all\":{\"max\":10,\"window_ms\":3600000}}}";

    static String state(String schedule, String owner, String firing) {
        return "{\"name\":\"nightly.report\",\"schedule\":" + schedule + ",\"owner\":\"" + owner + "\","
                + "\"created_at_ms\":1767225600000,\"updated_at_ms\":1767225600500," + firing + "}";
    }

    @Test
    @DisplayName("a put sends every field of the schedule and ?owner; 201 is created, 200 replaced; the answer reads back equal")
    void put_writes_every_field() {
        String firing = "\"last_due_ms\":1767321000000,\"last_fire_at_ms\":1767321000412,"
                + "\"last_fired_task\":\"01KB0000000000000000000000\",\"next_due_ms\":1767407400000,\"fires\":1,"
                + "\"skips\":{\"catch_up_skip\":2,\"paused\":3}";
        Canned created = new Canned(201, state(FULL_JSON, "code", firing));
        PutScheduleResult r = client(created).putSchedule(FULL, ScheduleOwner.CODE);
        assertEquals("PUT", created.last.method());
        assertEquals("/v1/schedules/nightly.report", created.last.uri().getPath());
        assertEquals("owner=code", created.last.uri().getQuery());
        assertEquals("application/json", created.last.headers().get("content-type"));
        assertEquals(FULL_JSON, created.body());
        assertTrue(r.created());
        ScheduleState s = r.state();
        assertEquals(FULL, s.schedule(), "the definition read back equals the one put");
        assertEquals("nightly.report", s.name());
        assertEquals(ScheduleOwner.CODE, s.owner());
        assertEquals(Instant.ofEpochMilli(1767225600000L), s.createdAt());
        assertEquals(Instant.ofEpochMilli(1767225600500L), s.updatedAt());
        assertEquals(Optional.of(Instant.ofEpochMilli(1767321000000L)), s.lastDue());
        assertEquals(Optional.of(Instant.ofEpochMilli(1767321000412L)), s.lastFireAt());
        assertEquals(Optional.of("01KB0000000000000000000000"), s.lastFiredTask());
        assertEquals(Optional.of(Instant.ofEpochMilli(1767407400000L)), s.nextDue());
        assertEquals(1, s.fires());
        assertEquals(Map.of("catch_up_skip", 2L, "paused", 3L), s.skips());
        assertArrayEquals("{\"days\":1}".getBytes(StandardCharsets.UTF_8), s.schedule().task().payload());

        Canned replaced = new Canned(200, state(FULL_JSON, "api", "\"fires\":0,\"skips\":{}"));
        PutScheduleResult again = client(replaced).putSchedule(FULL);
        assertEquals("owner=api", replaced.last.uri().getQuery());
        assertFalse(again.created());
        assertEquals(ScheduleOwner.API, again.state().owner());
        assertEquals(Optional.empty(), again.state().lastDue());
        assertEquals(Optional.empty(), again.state().nextDue());
    }

    @Test
    @DisplayName("an interval with defaults writes them out; the server's defaults (null, absent) read back as the SDK's")
    void interval_and_defaults() {
        Schedule every = Schedule.every("tick", Duration.ofSeconds(90), ScheduleTask.of("q", "h"));
        Canned t = new Canned(201, "{}");
        assertEquals(RdqException.UNEXPECTED_RESPONSE, assertThrows(RdqException.class, () -> client(t).putSchedule(every)).code());
        assertEquals("{\"name\":\"tick\",\"task\":{\"queue\":\"q\",\"handler_ref\":\"h\","
                + "\"payload_content_type\":\"application/octet-stream\",\"priority\":0},\"spec\":{\"every_ms\":90000},"
                + "\"tz\":\"UTC\",\"paused\":false,\"overlap\":\"allow\",\"catch_up\":\"latest\"}", t.body());
        String sparse = "{\"name\":\"tick\",\"task\":{\"queue\":\"q\",\"handler_ref\":\"h\"},\"spec\":{\"every_ms\":90000},"
                + "\"catch_up\":null,\"overlap\":null,\"tz\":null,\"paused\":null}";
        ScheduleState s = client(new Canned(200, state(sparse, "api", "\"last_due_ms\":null,\"fires\":0,\"skips\":{}")))
                .getSchedule("tick");
        assertEquals(every, s.schedule());
        assertEquals(Optional.of(Duration.ofSeconds(90)), s.schedule().every());
        assertEquals(Optional.empty(), s.schedule().cronPattern());
        assertEquals(Schedule.CatchUp.latest(), s.schedule().catchUp());
        assertEquals(Optional.empty(), s.lastDue());

        Schedule skip = every.withCatchUp(Schedule.CatchUp.skip()).withPaused(true)
                .withOverlap(Schedule.Overlap.SKIP_IF_RUNNING);
        assertTrue(new String(skip.toJson(), StandardCharsets.UTF_8)
                .endsWith("\"paused\":true,\"overlap\":\"skip_if_running\",\"catch_up\":\"skip\"}"));
    }

    @Test
    @DisplayName("list, next and run read their answers; pause, resume, delete and run send no body")
    void other_calls() {
        String s = state(FULL_JSON, "code", "\"fires\":0,\"skips\":{}");
        Canned list = new Canned(200, "{\"schedules\":[" + s + "," + s.replace("\"code\"", "\"api\"") + "]}");
        List<ScheduleState> all = client(list).listSchedules();
        assertEquals("/v1/schedules", list.last.uri().getPath());
        assertEquals(List.of(ScheduleOwner.CODE, ScheduleOwner.API), all.stream().map(ScheduleState::owner).toList());

        Canned next = new Canned(200, "{\"name\":\"n\",\"due_ms\":[1000,61000],\"due\":[\"1970-01-01T00:00:01.000Z\","
                + "\"1970-01-01T00:01:01.000Z\"]}");
        assertEquals(List.of(Instant.ofEpochSecond(1), Instant.ofEpochSecond(61)), client(next).nextDue("n", 2));
        assertEquals("/v1/schedules/n/next", next.last.uri().getPath());
        assertEquals("count=2", next.last.uri().getQuery());

        Canned pause = new Canned(200, s);
        client(pause).pauseSchedule("nightly.report");
        assertEquals("POST", pause.last.method());
        assertEquals("/v1/schedules/nightly.report/pause", pause.last.uri().getPath());
        assertNull(pause.last.body());
        client(pause).resumeSchedule("nightly.report");
        assertEquals("/v1/schedules/nightly.report/resume", pause.last.uri().getPath());

        Canned delete = new Canned(204, "");
        client(delete).deleteSchedule("nightly.report");
        assertEquals("DELETE", delete.last.method());
        assertEquals("/v1/schedules/nightly.report", delete.last.uri().getPath());

        Canned missing = new Canned(404, "{\"code\":\"SCHEDULE_NOT_FOUND\",\"detail\":\"no schedule x\",\"status\":404}");
        RdqException e = assertThrows(RdqException.class, () -> client(missing).runSchedule("x"));
        assertEquals("SCHEDULE_NOT_FOUND", e.code());
        assertEquals(404, e.httpStatus());
        assertEquals("/v1/schedules/x/run", missing.last.uri().getPath());
    }

    @Test
    @DisplayName("a bad name is INVALID_SCHEDULE_NAME before any request; the template's rules name task.…")
    void local_refusals() {
        Canned t = new Canned(200, "{}");
        RdqClient c = client(t);
        for (String bad : new String[] {"", ".", "..", "Nightly", "a b", "a/b", "x".repeat(241)}) {
            RdqException e = assertThrows(RdqException.class, () -> c.getSchedule(bad), bad);
            assertEquals(Schedule.INVALID_SCHEDULE_NAME, e.code());
            assertEquals(Optional.of("name"), e.field());
            assertEquals(Schedule.INVALID_SCHEDULE_NAME, assertThrows(RdqException.class,
                    () -> Schedule.cron(bad, "* * * * *", ScheduleTask.of("q", "h"))).code());
        }
        assertThrows(RdqException.class, () -> c.deleteSchedule("A"));
        assertThrows(RdqException.class, () -> c.nextDue("A", 1));
        assertEquals(0, t.requests, "nothing was sent");
        // The longest name and dotted names are fine.
        Schedule.every("x".repeat(240), Duration.ofMillis(1), ScheduleTask.of("q", "h"));
        Schedule.every("...", Duration.ofMillis(1), ScheduleTask.of("q", "h"));

        RdqException queue = assertThrows(RdqException.class, () -> ScheduleTask.of("Bad Queue", "h"));
        assertEquals("INVALID_QUEUE_NAME", queue.code());
        assertEquals(Optional.of("task.queue"), queue.field());
        RdqException header = assertThrows(RdqException.class,
                () -> ScheduleTask.builder("q", "h").header("RDQ.x", "v").build());
        assertEquals("RESERVED_HEADER", header.code());
        assertEquals(Optional.of("task.headers.RDQ.x"), header.field());
        assertEquals("INVALID_FIELD", assertThrows(RdqException.class,
                () -> ScheduleTask.builder("q", "h").flowKey("a b").build()).code());
        assertEquals("INVALID_INTERVAL", assertThrows(RdqException.class,
                () -> Schedule.every("n", Duration.ofMillis(-1), ScheduleTask.of("q", "h"))).code());
        assertEquals("INVALID_INTERVAL", assertThrows(RdqException.class,
                () -> Schedule.every("n", Duration.ofNanos(1_500_000), ScheduleTask.of("q", "h"))).code());
        assertEquals("INVALID_WINDOW", assertThrows(RdqException.class,
                () -> Schedule.CatchUp.all(1, Duration.ofMillis(-5))).code());
    }

    @Test
    @DisplayName("an owner, spec or catch-up this SDK does not know is UNEXPECTED_RESPONSE")
    void unknown_answers() {
        String ok = "{\"name\":\"n\",\"task\":{\"queue\":\"q\",\"handler_ref\":\"h\"},\"spec\":{\"cron\":\"@daily\"}}";
        String firing = "\"fires\":0,\"skips\":{}";
        for (String bad : new String[] {
            state(ok, "robot", firing),
            state(ok.replace("{\"cron\":\"@daily\"}", "{\"rrule\":\"FREQ=DAILY\"}"), "api", firing),
            state(ok.replace("}}", "},\"catch_up\":\"everything\"}"), "api", firing),
            state(ok.replace("}}", "},\"overlap\":\"queue\"}"), "api", firing),
            state(ok, "api", "\"skips\":{}"),
        }) {
            RdqException e = assertThrows(RdqException.class, () -> client(new Canned(200, bad)).getSchedule("n"), bad);
            assertEquals(RdqException.UNEXPECTED_RESPONSE, e.code(), bad);
        }
        // Members this SDK does not know are ignored.
        ScheduleState s = client(new Canned(200, state(ok.replace("}}", "},\"jitter_ms\":5}"), "api",
                firing + ",\"next_fire_node\":\"a\""))).getSchedule("n");
        assertEquals(Optional.of("@daily"), s.schedule().cronPattern());
    }

    @Test
    @DisplayName("start and end keep whole milliseconds; the schedule is a value")
    void value_semantics() {
        Instant t = Instant.parse("2026-01-01T00:00:00.123456789Z");
        Schedule s = FULL.withStart(t);
        assertEquals(Optional.of(Instant.parse("2026-01-01T00:00:00.123Z")), s.start());
        assertEquals(FULL, FULL.withZone("Europe/London"));
        assertFalse(FULL.equals(FULL.withPaused(true)));
        assertEquals(FULL.hashCode(), FULL.withTask(FULL.task().toBuilder().build()).hashCode());
        byte[] p = FULL.task().payload();
        p[0] = 'X';
        assertEquals('{', FULL.task().payload()[0], "the payload is copied");
    }
}
