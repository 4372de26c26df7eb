package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.PutScheduleResult;
import dev.rdq.client.RdqClient;
import dev.rdq.client.Schedule;
import dev.rdq.client.ScheduleOwner;
import dev.rdq.client.ScheduleState;
import dev.rdq.client.ScheduleTask;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.Status;
import dev.rdq.support.Await;
import dev.rdq.support.RdqServer;
import dev.rdq.worker.Worker;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * Schedules against a real {@code rdq serve} (one embedded-store server for
 * the class; each test has its own queues and schedule names): the
 * management calls, the server's refusals, and schedules declared in code by
 * a worker, fired by the server's scheduler.
 */
@DisplayName("schedules on the embedded store")
class ScheduleTest {
    static RdqServer server;
    static RdqClient client;
    final List<Worker> workers = new ArrayList<>();

    @BeforeAll
    static void startServer() {
        server = RdqServer.embedded();
        client = server.client();
    }

    @AfterAll
    static void stopServer() {
        server.close();
    }

    @AfterEach
    void stopWorkers() {
        for (Worker w : workers) {
            w.shutdown(Duration.ofSeconds(2));
        }
    }

    Worker start(Worker.Builder b) {
        Worker w = b.build();
        workers.add(w);
        return w.start();
    }

    static RdqException notFound(String name) {
        RdqException e = assertThrows(RdqException.class, () -> client.getSchedule(name));
        assertEquals("SCHEDULE_NOT_FOUND", e.code());
        assertEquals(404, e.httpStatus());
        return e;
    }

    static List<String> names() {
        return client.listSchedules().stream().map(ScheduleState::name).toList();
    }

    @Test
    @DisplayName("put, put again, get, list, next, pause, resume, run and delete")
    void management_round_trip() {
        String name = "mgmt.every5";
        ScheduleTask task = ScheduleTask.builder("sched.mgmt", "tick").payloadJson("{\"n\":1}").header("team", "data")
                .priority(3).build();
        Schedule s = Schedule.cron(name, "*/5 * * * *", task).withZone("Europe/London");

        PutScheduleResult put = client.putSchedule(s);
        assertTrue(put.created());
        ScheduleState created = put.state();
        assertEquals(name, created.name());
        assertEquals(s, created.schedule(), "the stored definition is the one put");
        assertEquals(ScheduleOwner.API, created.owner());
        assertEquals(0, created.fires());
        assertTrue(created.nextDue().isPresent());

        Schedule changed = s.withOverlap(Schedule.Overlap.SKIP_IF_RUNNING)
                .withCatchUp(Schedule.CatchUp.all(3, Duration.ofMinutes(30)));
        PutScheduleResult again = client.putSchedule(changed);
        assertFalse(again.created(), "a put of a stored name replaces it");
        assertEquals(changed, again.state().schedule());
        assertEquals(created.createdAt(), again.state().createdAt(), "a replace keeps the creation time");

        ScheduleState got = client.getSchedule(name);
        assertEquals(changed, got.schedule());
        assertEquals(ScheduleOwner.API, got.owner());
        assertTrue(names().contains(name));

        List<Instant> next = client.nextDue(name, 3);
        assertEquals(3, next.size());
        for (int i = 0; i < next.size(); i++) {
            assertEquals(0, next.get(i).getEpochSecond() % 300, "on a five-minute mark: " + next.get(i));
            if (i > 0) {
                assertEquals(Duration.ofMinutes(5), Duration.between(next.get(i - 1), next.get(i)));
            }
        }
        assertTrue(next.get(0).isAfter(Instant.now().minusSeconds(1)));
        assertFalse(next.get(0).isAfter(Instant.now().plus(Duration.ofMinutes(5))));

        ScheduleState paused = client.pauseSchedule(name);
        assertTrue(paused.paused());
        assertTrue(client.getSchedule(name).schedule().paused());
        assertEquals(3, client.nextDue(name, 3).size(), "a paused schedule still answers its due times");
        ScheduleState resumed = client.resumeSchedule(name);
        assertFalse(resumed.paused());
        assertFalse(client.getSchedule(name).paused());

        Envelope run = client.runSchedule(name);
        assertEquals("sched.mgmt", run.queue());
        assertEquals("tick", run.handlerRef());
        assertEquals(Status.PENDING, run.status());
        assertEquals(name, run.header("rdq.schedule").orElseThrow());
        assertEquals("true", run.header("rdq.schedule_manual").orElseThrow());
        assertEquals(Optional.empty(), run.header("rdq.schedule_due"), "a manual run has no due time");
        assertEquals("data", run.header("team").orElseThrow());
        assertEquals(3, run.priority());
        assertArrayEquals("{\"n\":1}".getBytes(StandardCharsets.UTF_8), client.get(run.id()).payload());
        assertEquals(0, client.getSchedule(name).fires(), "a manual run is not counted as a fire");

        client.deleteSchedule(name);
        notFound(name);
        assertFalse(names().contains(name));
        assertEquals("SCHEDULE_NOT_FOUND", assertThrows(RdqException.class, () -> client.deleteSchedule(name)).code());
        assertEquals("SCHEDULE_NOT_FOUND", assertThrows(RdqException.class, () -> client.runSchedule(name)).code());
        assertEquals(run.id(), client.get(run.id()).id(), "the tasks a schedule submitted outlive it");
    }

    @Test
    @DisplayName("an interval's due times are its period apart, anchored at the epoch or at start")
    void interval_due_times() {
        String name = "mgmt.every90s";
        client.putSchedule(Schedule.every(name, Duration.ofSeconds(90), ScheduleTask.of("sched.interval", "h")));
        List<Instant> next = client.nextDue(name, 4);
        assertEquals(4, next.size());
        for (int i = 0; i < next.size(); i++) {
            assertEquals(0, next.get(i).toEpochMilli() % 90_000, "a multiple of 90 s since the epoch: " + next.get(i));
            if (i > 0) {
                assertEquals(Duration.ofSeconds(90), Duration.between(next.get(i - 1), next.get(i)));
            }
        }
        Instant anchor = Instant.now().plusSeconds(3600).plusMillis(7);
        client.putSchedule(Schedule.every(name, Duration.ofSeconds(90), ScheduleTask.of("sched.interval", "h"))
                .withStart(anchor).withEnd(anchor.plusSeconds(90)));
        assertEquals(List.of(anchor.truncatedTo(java.time.temporal.ChronoUnit.MILLIS),
                anchor.truncatedTo(java.time.temporal.ChronoUnit.MILLIS).plusSeconds(90)), client.nextDue(name, 5),
                "from start, and no due time after end");
        client.deleteSchedule(name);
    }

    @Test
    @DisplayName("refusals: an invalid cron, an unknown zone and a bad window store nothing; a bad name never leaves the client")
    void bad_input() {
        ScheduleTask task = ScheduleTask.of("sched.bad", "h");
        RdqException cron = assertThrows(RdqException.class,
                () -> client.putSchedule(Schedule.cron("bad.cron", "61 * * * *", task)));
        assertEquals("INVALID_CRON", cron.code());
        assertEquals(Optional.of("spec.cron"), cron.field());
        assertEquals(400, cron.httpStatus());
        notFound("bad.cron");

        RdqException zone = assertThrows(RdqException.class,
                () -> client.putSchedule(Schedule.cron("bad.zone", "0 9 * * *", task).withZone("Mars/Olympus_Mons")));
        assertEquals("UNKNOWN_TIME_ZONE", zone.code());
        assertEquals(Optional.of("tz"), zone.field());
        notFound("bad.zone");

        Instant t = Instant.now();
        RdqException window = assertThrows(RdqException.class, () -> client.putSchedule(
                Schedule.every("bad.window", Duration.ofMinutes(1), task).withStart(t).withEnd(t.minusSeconds(1))));
        assertEquals("INVALID_WINDOW", window.code());
        assertEquals(Optional.of("end_ms"), window.field());
        RdqException interval = assertThrows(RdqException.class,
                () -> client.putSchedule(Schedule.every("bad.interval", Duration.ZERO, task)));
        assertEquals("INVALID_INTERVAL", interval.code());
        assertFalse(names().stream().anyMatch(n -> n.startsWith("bad.")), "a refused schedule stores nothing");

        RdqException name = assertThrows(RdqException.class, () -> client.getSchedule("Bad Name"));
        assertEquals("INVALID_SCHEDULE_NAME", name.code());
        assertEquals(0, name.httpStatus(), "refused by the client, not the server");
        assertEquals("INVALID_SCHEDULE_NAME", assertThrows(RdqException.class,
                () -> Schedule.cron("Bad Name", "* * * * *", task)).code());
        assertEquals("INVALID_SCHEDULE_NAME", assertThrows(RdqException.class, () -> client.pauseSchedule("..")).code());
    }

    @Test
    @DisplayName("a worker's declared every-1s schedule is stored owned by code, and the server fires it to the worker's handler")
    void worker_declares_and_the_server_fires() {
        String q = "sched.fire";
        String name = "fire.every1s";
        List<Envelope> seen = new CopyOnWriteArrayList<>();
        Worker w = start(Worker.builder(client)
                .handler(q, "tick", seen::add)
                .schedule(Schedule.every(name, Duration.ofSeconds(1),
                        ScheduleTask.builder(q, "tick").header("from", "code").build())));
        ScheduleState stored = client.getSchedule(name);
        assertEquals(ScheduleOwner.CODE, stored.owner());
        assertEquals(Optional.of(Duration.ofSeconds(1)), stored.schedule().every());
        assertFalse(w.undeclaredSchedules().contains(name));

        Envelope fired = Await.until("a fire of " + name, Duration.ofSeconds(60),
                () -> seen.isEmpty() ? null : seen.get(0));
        assertEquals(name, fired.header("rdq.schedule").orElseThrow());
        assertEquals("code", fired.header("from").orElseThrow());
        assertTrue(fired.header("rdq.schedule_due").isPresent(), "a fire carries its due time");
        assertEquals(Optional.empty(), fired.header("rdq.schedule_manual"));
        Await.until("the fire's task to succeed", () -> client.get(fired.id()).status() == Status.SUCCEEDED);
        ScheduleState after = client.getSchedule(name);
        assertTrue(after.fires() >= 1);
        assertTrue(after.lastFiredTask().isPresent());
        assertEquals(ScheduleOwner.CODE, after.owner());

        w.shutdown(Duration.ofSeconds(2));
        client.deleteSchedule(name);
    }

    /** Records what the worker logs at WARNING. */
    static final class Warnings extends Handler {
        final List<String> messages = new CopyOnWriteArrayList<>();

        @Override
        public void publish(LogRecord r) {
            if (r.getLevel().intValue() >= Level.WARNING.intValue()) {
                messages.add(r.getMessage());
            }
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
    }

    @Test
    @DisplayName("a worker reports, and never deletes, the code-owned schedules it no longer declares; api-owned ones are not its")
    void undeclared_schedules_are_reported() {
        String q = "sched.undeclared";
        ScheduleTask task = ScheduleTask.of(q, "h");
        Schedule a = Schedule.cron("undeclared.a", "0 3 * * *", task);
        Schedule b = Schedule.cron("undeclared.b", "0 4 * * *", task);
        client.putSchedule(Schedule.cron("undeclared.api", "0 5 * * *", task));

        Worker first = start(Worker.builder(client).handler(q, "h", e -> {}).schedule(a).schedule(b));
        assertFalse(first.undeclaredSchedules().contains("undeclared.a"));
        assertFalse(first.undeclaredSchedules().contains("undeclared.b"));
        first.shutdown(Duration.ofSeconds(2));
        assertEquals(ScheduleOwner.CODE, client.getSchedule("undeclared.a").owner());

        Logger log = Logger.getLogger("dev.rdq.worker");
        Warnings warnings = new Warnings();
        log.addHandler(warnings);
        try {
            Worker second = start(Worker.builder(client).handler(q, "h", e -> {}).schedule(b));
            List<String> undeclared = second.undeclaredSchedules();
            assertTrue(undeclared.contains("undeclared.a"), undeclared::toString);
            assertFalse(undeclared.contains("undeclared.b"), "it declares b");
            assertFalse(undeclared.contains("undeclared.api"), "an api-owned schedule is never reported");
            assertTrue(warnings.messages.stream().anyMatch(m -> m.contains("undeclared.a")
                    && m.contains("rdq schedule delete undeclared.a")), warnings.messages::toString);
            assertFalse(warnings.messages.stream().anyMatch(m -> m.contains("undeclared.api")));
        } finally {
            log.removeHandler(warnings);
        }
        ScheduleState kept = client.getSchedule("undeclared.a");
        assertEquals(ScheduleOwner.CODE, kept.owner(), "reported, not deleted");
        assertEquals(a, kept.schedule());
        assertEquals(ScheduleOwner.API, client.getSchedule("undeclared.api").owner());

        for (String n : List.of("undeclared.a", "undeclared.b", "undeclared.api")) {
            client.deleteSchedule(n);
        }
    }

    @Test
    @DisplayName("a worker declaring an invalid schedule fails to start with INVALID_CRON and takes no task; two of one name are refused before any put")
    void invalid_declarations_fail_start() throws Exception {
        String q = "sched.invalid";
        ScheduleTask task = ScheduleTask.of(q, "h");
        Envelope waiting = Support.submit(client, q, "h", "x");
        List<Envelope> seen = new CopyOnWriteArrayList<>();
        Worker w = Worker.builder(client).handler(q, "h", seen::add)
                .schedule(Schedule.every("invalid.ok", Duration.ofHours(1), task))
                .schedule(Schedule.cron("invalid.cron", "not a cron", task))
                .build();
        workers.add(w);
        RdqException e = assertThrows(RdqException.class, w::start);
        assertEquals("INVALID_CRON", e.code());
        assertEquals(Optional.of("spec.cron"), e.field());
        notFound("invalid.cron");
        assertEquals(ScheduleOwner.CODE, client.getSchedule("invalid.ok").owner(),
                "the declarations before the refused one are stored");
        Thread.sleep(500);
        assertTrue(seen.isEmpty(), "the worker took no task");
        assertEquals(Status.PENDING, client.get(waiting.id()).status());
        assertEquals(0, client.get(waiting.id()).attempts().size());
        w.close(); // harmless on a worker that did not start

        RdqException twice = assertThrows(RdqException.class, () -> Worker.builder(client).handler(q, "h", seen::add)
                .schedule(Schedule.every("invalid.twice", Duration.ofHours(1), task))
                .schedule(Schedule.cron("invalid.twice", "@daily", task)));
        assertEquals("INVALID_ARGUMENT", twice.code());
        assertEquals(Optional.of("name"), twice.field());
        notFound("invalid.twice");
        client.deleteSchedule("invalid.ok");
    }
}
