package dev.rdq.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.client.ClaimedTask;
import dev.rdq.client.Settle;
import dev.rdq.client.SettleOutcome;
import dev.rdq.client.ThrottleScope;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletionException;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class OutcomeLadderTest {
    static class Declined extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    static final class Expired extends Declined {
        private static final long serialVersionUID = 1L;
    }

    final OutcomeLadder lists = new OutcomeLadder(null, List.of(SocketTimeoutException.class, IOException.class),
            List.of(Declined.class, SocketTimeoutException.class));

    @Test
    @DisplayName("a normal return of any value is SUCCESS; a returned Outcome is taken as is")
    void returns() {
        assertEquals(Outcome.Kind.SUCCESS, lists.decide(null, null).kind());
        assertEquals(Outcome.Kind.SUCCESS, lists.decide(false, null).kind());
        assertEquals(Outcome.Kind.PERMANENT_FAILURE, lists.decide(Outcome.permanent("t", "m"), null).kind());
    }

    @Test
    @DisplayName("the mapper is authoritative, sees value and error, and a null answer falls through")
    void mapper() {
        OutcomeLadder l = new OutcomeLadder((ret, err) -> {
            if (err instanceof IllegalStateException) {
                return Outcome.success();
            }
            return Boolean.FALSE.equals(ret) ? Outcome.permanent("app.False", "returned false") : null;
        }, List.of(), List.of(IllegalStateException.class));
        assertEquals(Outcome.Kind.SUCCESS, l.decide(null, new IllegalStateException()).kind());
        Outcome f = l.decide(false, null);
        assertEquals(Outcome.Kind.PERMANENT_FAILURE, f.kind());
        assertEquals("app.False", f.error().orElseThrow().type());
        assertEquals(Outcome.Kind.SUCCESS, l.decide(true, null).kind());
        assertEquals(Outcome.Kind.UNCLASSIFIED_FAILURE, l.decide(null, new RuntimeException()).kind());
        OutcomeLadder broken = new OutcomeLadder((ret, err) -> {
            throw new IllegalArgumentException("mapper bug");
        }, List.of(), List.of());
        assertEquals(Outcome.Kind.RETRYABLE_FAILURE, broken.decide(null, null).kind());
    }

    @Test
    @DisplayName("wrappers are found through the cause chain and override the lists")
    void wrappers() {
        Outcome r = lists.decide(null, new RetryableException(new Expired()));
        assertEquals(Outcome.Kind.RETRYABLE_FAILURE, r.kind());
        assertEquals(Expired.class.getName(), r.error().orElseThrow().type());
        Outcome p = lists.decide(null, new CompletionException(new PermanentException("billing.Declined", "no")));
        assertEquals(Outcome.Kind.PERMANENT_FAILURE, p.kind());
        assertEquals("billing.Declined", p.error().orElseThrow().type());
        Outcome d = lists.decide(null, new DeferException(Duration.ofSeconds(5)));
        assertEquals(Duration.ofSeconds(5), d.deferDelay().orElseThrow());
    }

    @Test
    @DisplayName("a ThrottleException is DEFER carrying its scope, found through the cause chain; a DeferException throttles nothing")
    void throttles() {
        Outcome plain = lists.decide(null, new DeferException(Duration.ofSeconds(1)));
        assertEquals(Outcome.Kind.DEFER, plain.kind());
        assertTrue(plain.throttle().isEmpty());
        Outcome key = lists.decide(null, new CompletionException(new ThrottleException(Duration.ofSeconds(1))));
        assertEquals(Outcome.Kind.DEFER, key.kind());
        assertEquals(Duration.ofSeconds(1), key.deferDelay().orElseThrow());
        assertEquals(ThrottleScope.KEY, key.throttle().orElseThrow());
        assertEquals(ThrottleScope.KEY, lists.decide(null, ThrottleException.key(Duration.ofSeconds(1))).throttle().orElseThrow());
        Outcome queue = lists.decide(null, ThrottleException.queue(Duration.ofMinutes(1)));
        assertEquals(ThrottleScope.QUEUE, queue.throttle().orElseThrow());
        assertEquals(Duration.ofMinutes(1), queue.deferDelay().orElseThrow());
        assertEquals(ThrottleScope.QUEUE, new ThrottleException(Duration.ZERO, ThrottleScope.QUEUE).scope());
        assertEquals("throttled (queue) for 60000 ms", ThrottleException.queue(Duration.ofMinutes(1)).getMessage());
        assertThrows(IllegalArgumentException.class, () -> new ThrottleException(Duration.ofSeconds(-1)));
        assertThrows(NullPointerException.class, () -> new ThrottleException(Duration.ofSeconds(1), null));
        // A mapper or a ValueHandler says the same with an Outcome.
        assertEquals(ThrottleScope.QUEUE, lists.decide(Outcome.throttled(Duration.ofSeconds(2), ThrottleScope.QUEUE), null)
                .throttle().orElseThrow());
        assertTrue(Outcome.throttled(Duration.ofSeconds(2), null).throttle().isEmpty());
        assertTrue(Outcome.permanent("t", "m").throttle().isEmpty());
        assertThrows(IllegalArgumentException.class, () -> Outcome.throttled(Duration.ofSeconds(-1), ThrottleScope.KEY));
    }

    @Test
    @DisplayName("the worker's settle of a throttling outcome is DEFER with defer_ms and the scope")
    void throttle_settles() {
        ClaimedTask c = new ClaimedTask("01J2ZK7Q8XW5H3N9G4T6B8RDQ0", "lease", null);
        Settle key = Worker.toSettle(c.id(), c.leaseToken(), lists.decide(null, new ThrottleException(Duration.ofMillis(1500))));
        assertEquals(SettleOutcome.DEFER, key.outcome());
        assertEquals(1500L, key.deferMs());
        assertEquals(ThrottleScope.KEY, key.throttle());
        assertNull(key.error());
        assertEquals(ThrottleScope.QUEUE, Worker.toSettle(c.id(), c.leaseToken(), Outcome.throttled(Duration.ofSeconds(3), ThrottleScope.QUEUE)).throttle());
        Settle plain = Worker.toSettle(c.id(), c.leaseToken(), Outcome.defer(Duration.ofSeconds(3)));
        assertEquals(3000L, plain.deferMs());
        assertNull(plain.throttle());
        assertNull(Worker.toSettle(c.id(), c.leaseToken(), Outcome.success()).throttle());
    }

    @Test
    @DisplayName("lists match subclasses and causes; in both lists, or both in the chain, non-retryable wins")
    void lists_match() {
        assertEquals(Outcome.Kind.PERMANENT_FAILURE, lists.decide(null, new Expired()).kind());
        assertEquals(Outcome.Kind.RETRYABLE_FAILURE, lists.decide(null, new IOException()).kind());
        assertEquals(Outcome.Kind.PERMANENT_FAILURE, lists.decide(null, new SocketTimeoutException()).kind());
        Outcome chain = lists.decide(null, new UncheckedIOException(new IOException(new Expired())));
        assertEquals(Outcome.Kind.PERMANENT_FAILURE, chain.kind());
        assertEquals("java.io.UncheckedIOException", chain.error().orElseThrow().type());
        assertEquals(Outcome.Kind.UNCLASSIFIED_FAILURE, lists.decide(null, new StackOverflowError()).kind());
    }

    @Test
    @DisplayName("the recorded error is the class name, the message (empty when null) and the stack")
    void recorded_error() {
        Outcome o = Outcome.unclassified(new IllegalStateException());
        assertEquals("java.lang.IllegalStateException", o.error().orElseThrow().type());
        assertEquals("", o.error().orElseThrow().message());
        assertTrue(o.error().orElseThrow().stack().orElseThrow().startsWith("java.lang.IllegalStateException"));
    }

    @Test
    @DisplayName("error_type: a wrapper records its cause's class; a list match in the cause chain records the thrown class")
    void error_type_when_a_cause_decided() {
        // A wrapper carries a decision, not a failure: the cause is what went wrong.
        Outcome wrapped = lists.decide(null, new RetryableException(new IOException("disk full")));
        assertEquals(Outcome.Kind.RETRYABLE_FAILURE, wrapped.kind());
        assertEquals("java.io.IOException", wrapped.error().orElseThrow().type());
        assertEquals("disk full", wrapped.error().orElseThrow().message());
        assertEquals("java.io.IOException",
                lists.decide(null, new PermanentException(new IOException("x"))).error().orElseThrow().type());
        // Without a cause, the wrapper itself; with a type given, that type.
        assertEquals(RetryableException.class.getName(),
                lists.decide(null, new RetryableException("no cause")).error().orElseThrow().type());
        assertEquals("billing.Declined",
                lists.decide(null, new PermanentException("billing.Declined", "m")).error().orElseThrow().type());
        // A wrapper found below the thrown exception records its own cause too.
        assertEquals("java.io.IOException", lists.decide(null,
                new CompletionException(new RetryableException(new IOException("x")))).error().orElseThrow().type());
        // A list decides on a cause, but the thrown exception is what is recorded (its stack shows the chain).
        Outcome listed = lists.decide(null, new UncheckedIOException(new IOException("io", new Declined())));
        assertEquals(Outcome.Kind.PERMANENT_FAILURE, listed.kind());
        assertEquals("java.io.UncheckedIOException", listed.error().orElseThrow().type());
        assertTrue(listed.error().orElseThrow().stack().orElseThrow().contains(Declined.class.getName()));
    }
}
