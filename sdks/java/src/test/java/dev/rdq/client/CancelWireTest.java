package dev.rdq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** The cancel's wire: {@code pending_only} in the request, {@code running} in the answer. */
class CancelWireTest {
    static final String A = "01J2ZK7Q8XW5H3N9G4T6B8RDQ0";
    static final String B = "01J2ZK7Q8XW5H3N9G4T6B8RDQ1";

    /** Answers every request with {@code answer}, remembering the last body. */
    static final class Canned implements Transport {
        final String answer;
        volatile Request last;

        Canned(String answer) {
            this.answer = answer;
        }

        @Override
        public Response send(Request r) {
            last = r;
            return new Response(200, answer.getBytes(StandardCharsets.UTF_8));
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

    static CancelResult cancel(Canned t, CancelFilter f) {
        try (RdqClient c = RdqClient.builder("http://rdq.invalid").transport(t).build()) {
            return c.cancel("q", f);
        }
    }

    @Test
    @DisplayName("pending_only is sent only when set; running lists the tasks asked to stop")
    void pending_only_and_running() {
        Canned t = new Canned("{\"queue\":\"q\",\"dry_run\":false,\"count\":2,\"ids\":[\"" + A + "\",\"" + B + "\"],"
                + "\"running\":[\"" + B + "\"]}");
        CancelResult r = cancel(t, CancelFilter.ids(A, B).because("withdrawn"));
        assertEquals("/v1/queues/q/cancel", t.last.uri().getPath());
        assertEquals("{\"ids\":[\"" + A + "\",\"" + B + "\"],\"dry_run\":false,\"message\":\"withdrawn\"}", t.body());
        assertEquals(new CancelResult("q", false, 2, List.of(A, B), List.of(B)), r);

        cancel(t, CancelFilter.all().withHandler("h").pendingOnly(true));
        assertEquals("{\"handler_ref\":\"h\",\"dry_run\":false,\"pending_only\":true}", t.body());
        cancel(t, CancelFilter.all().pendingOnly(true).pendingOnly(false));
        assertEquals("{\"dry_run\":false}", t.body());
    }

    @Test
    @DisplayName("an answer without running (an older server) has none; a running id that is not a string is UNEXPECTED_RESPONSE")
    void older_server_and_bad_answers() {
        CancelResult r = cancel(new Canned("{\"queue\":\"q\",\"dry_run\":true,\"count\":1,\"ids\":[\"" + A + "\"]}"),
                CancelFilter.ids(A).dryRun(true));
        assertEquals(List.of(), r.running());
        assertTrue(r.dryRun());
        RdqException e = assertThrows(RdqException.class, () -> cancel(
                new Canned("{\"queue\":\"q\",\"dry_run\":false,\"count\":1,\"ids\":[\"" + A + "\"],\"running\":[7]}"),
                CancelFilter.ids(A)));
        assertEquals(RdqException.UNEXPECTED_RESPONSE, e.code());
    }

    @Test
    @DisplayName("every with… keeps pendingOnly; the seven-component constructor leaves it false")
    void filter_keeps_pending_only() {
        CancelFilter f = CancelFilter.all().pendingOnly(true).withIds(List.of(A)).withHandler("h")
                .withHeaders(Map.of("k", "v")).olderThan(Duration.ofMinutes(1)).limit(3).dryRun(true).because("m");
        assertTrue(f.pendingOnly());
        assertFalse(new CancelFilter(null, null, null, null, null, false, null).pendingOnly());
        assertEquals(List.of(), new CancelResult("q", false, 0, List.of()).running());
    }
}
