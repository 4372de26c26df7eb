package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.UniqueHeldException;
import dev.rdq.client.CancelFilter;
import dev.rdq.client.ClaimedTask;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitProtocol;
import dev.rdq.client.SubmitRequest;
import dev.rdq.client.SubmitResult;
import dev.rdq.client.UniqueConflict;
import dev.rdq.client.UniqueHold;
import dev.rdq.client.UniqueScope;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.Status;
import dev.rdq.support.RdqServer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.Parameter;
import org.junit.jupiter.params.ParameterizedClass;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Unique submits ({@code docs/uniqueness.md}) against a real {@code rdq
 * serve} on the in-memory store (the store with capability {@code unique}),
 * every test over HTTP and over gRPC, each with queues of its own.
 */
@DisplayName("unique submits on the memory store")
@ParameterizedClass(name = "submits over {0}")
@EnumSource(SubmitProtocol.class)
class UniqueTest {
    private static final AtomicInteger QUEUES = new AtomicInteger();
    static RdqServer server;

    @Parameter
    SubmitProtocol protocol;

    RdqClient client;
    String queue;

    @BeforeAll
    static void startServer() {
        server = RdqServer.memory();
    }

    @AfterAll
    static void stopServer() {
        server.close();
    }

    @BeforeEach
    void connect() {
        client = RdqClient.builder(server.url()).submitProtocol(protocol).build();
        assertEquals(protocol, client.submitProtocol());
        queue = "java.unique." + protocol.name().toLowerCase(java.util.Locale.ROOT) + "." + QUEUES.incrementAndGet();
        Assumptions.assumeTrue(client.capabilities().getOrDefault("unique", false), "the store keeps no unique keys");
    }

    @AfterEach
    void disconnect() {
        client.close();
    }

    SubmitRequest.Builder task(String payloadJson) {
        return SubmitRequest.builder(queue, "charge").payloadJson(payloadJson);
    }

    long pending() {
        return client.queues().stream().filter(q -> q.queue().equals(queue)).mapToLong(q -> q.pending()).sum();
    }

    @Test
    @DisplayName("a second submit of a held key is UNIQUE_HELD naming the first, and writes nothing")
    void second_submit_conflicts() {
        Envelope first = client.submit(task("{\"n\":1}").uniqueKey("invoice-42").build());
        assertEquals("invoice-42", first.headers().get("rdq.unique_key"));
        assertEquals("until_finished", first.headers().get("rdq.unique_hold"));

        UniqueHeldException e = assertThrows(UniqueHeldException.class,
                () -> client.submit(task("{\"n\":2}").uniqueKey("invoice-42").build()));
        assertEquals("UNIQUE_HELD", e.code());
        assertEquals(first.id(), e.holder());
        assertEquals("until_finished", e.hold().orElseThrow());
        assertEquals(409, e.httpStatus());
        assertTrue(e.detail().contains(first.id()), e.detail());

        // The asynchronous submit fails the same way.
        CompletionException async = assertThrows(CompletionException.class,
                () -> client.submitAsync(task("{\"n\":3}").uniqueKey("invoice-42").build()).join());
        UniqueHeldException cause = assertInstanceOf(UniqueHeldException.class, async.getCause());
        assertEquals(first.id(), cause.holder());
        assertEquals(1, pending(), "nothing was written");

        // Another key is free.
        assertFalse(client.submit(task("{\"n\":4}").uniqueKey("invoice-43").build()).id().equals(first.id()));
    }

    @Test
    @DisplayName("the holder's hold comes back as the server writes it: for:MILLIS")
    void hold_for_is_named() {
        Envelope first = client.submit(task("{}").uniqueKey("k").uniqueHoldFor(Duration.ofMinutes(1)).build());
        UniqueHeldException e = assertThrows(UniqueHeldException.class,
                () -> client.submit(task("{}").uniqueKey("k").build()));
        assertEquals(first.id(), e.holder());
        assertEquals("for:60000", e.hold().orElseThrow());
    }

    @Test
    @DisplayName("key_from derives one key whatever the order of the payload's members, as docs/uniqueness.md says")
    void key_from_ignores_member_order() throws NoSuchAlgorithmException {
        Envelope first = client.submit(task("{\"customer\":{\"id\":42,\"tier\":\"gold\"},\"month\":\"2026-12\",\"note\":\"a\"}")
                .uniqueKeyFrom("/customer", "/month").build());
        UniqueHeldException e = assertThrows(UniqueHeldException.class, () -> client.submit(
                task("{ \"note\": \"b\", \"month\": \"2026-12\", \"customer\": { \"tier\": \"gold\", \"id\": 42 } }")
                        .uniqueKeyFrom("/customer", "/month").build()));
        assertEquals(first.id(), e.holder());

        String canonical = "[{\"id\":42,\"tier\":\"gold\"},\"2026-12\"]";
        String expected = "sha256:" + HexFormat.of().formatHex(
                MessageDigest.getInstance("SHA-256").digest(canonical.getBytes(StandardCharsets.UTF_8)));
        assertEquals(expected, first.headers().get("rdq.unique_key"));

        // Other values are another key.
        client.submit(task("{\"customer\":{\"id\":43,\"tier\":\"gold\"},\"month\":\"2026-12\"}")
                .uniqueKeyFrom("/customer", "/month").build());
        assertEquals(2, pending());
    }

    @Test
    @DisplayName("existing: the holder is answered unchanged; forever/existing is the idempotency key")
    void existing_answers_the_holder() {
        Envelope first = client.submit(task("{\"v\":1}").uniqueKey("doc")
                .uniqueOnConflict(UniqueConflict.EXISTING).build());
        Envelope met = client.submit(task("{\"v\":2}").uniqueKey("doc")
                .uniqueOnConflict(UniqueConflict.EXISTING).build());
        assertEquals(first.id(), met.id());
        assertEquals("{\"v\":1}", new String(met.payload(), StandardCharsets.UTF_8), "nothing is replaced");
        Envelope keyed = client.submit(task("{\"v\":3}").idempotencyKey("order-1").build());
        Envelope same = client.submit(task("{\"v\":4}").uniqueKey("order-1").uniqueHold(UniqueHold.FOREVER)
                .uniqueOnConflict(UniqueConflict.EXISTING).build());
        assertEquals(keyed.id(), same.id());
    }

    @Test
    @DisplayName("replace: a waiting holder takes the new payload and is answered; a running one is UNIQUE_HELD")
    void replace_updates_a_waiting_holder() {
        Envelope first = client.submit(task("{\"v\":1}").uniqueKey("report").header("h", "1").build());
        Envelope replaced = client.submit(task("{\"v\":2}").uniqueKey("report").header("h", "2")
                .uniqueOnConflict(UniqueConflict.REPLACE).build());
        assertEquals(first.id(), replaced.id());
        assertEquals("{\"v\":2}", new String(replaced.payload(), StandardCharsets.UTF_8));
        assertEquals("2", replaced.headers().get("h"));
        assertEquals(first.nextAttemptAt(), replaced.nextAttemptAt(), "replace keeps the due time");
        Envelope stored = client.get(first.id());
        assertEquals("{\"v\":2}", new String(stored.payload(), StandardCharsets.UTF_8));
        assertEquals(1, pending());

        List<ClaimedTask> claimed = client.claim(queue, 1, null);
        assertEquals(first.id(), claimed.get(0).id());
        UniqueHeldException running = assertThrows(UniqueHeldException.class, () -> client.submit(
                task("{\"v\":3}").uniqueKey("report").uniqueOnConflict(UniqueConflict.REPLACE).build()));
        assertEquals(first.id(), running.holder());
        assertEquals(Status.IN_FLIGHT, client.get(first.id()).status());
        assertEquals("{\"v\":2}", new String(client.get(first.id()).payload(), StandardCharsets.UTF_8),
                "a payload in flight is never replaced");
    }

    @Test
    @DisplayName("debounce: a waiting holder takes the new payload and the submit's due time")
    void debounce_moves_the_due_time() {
        Envelope first = client.submit(task("{\"v\":1}").uniqueKey("burst").delay(Duration.ofHours(1)).build());
        Envelope last = client.submit(task("{\"v\":2}").uniqueKey("burst").delay(Duration.ofSeconds(5))
                .uniqueOnConflict(UniqueConflict.DEBOUNCE).build());
        assertEquals(first.id(), last.id());
        java.time.Instant before = first.nextAttemptAt().orElseThrow();
        java.time.Instant after = last.nextAttemptAt().orElseThrow();
        assertTrue(after.isBefore(before.minus(Duration.ofMinutes(30))), before + " then " + after);
        assertEquals("{\"v\":2}", new String(last.payload(), StandardCharsets.UTF_8));
    }

    @Test
    @DisplayName("scope handler: one key is held once per handler")
    void handler_scope() {
        client.submit(task("{}").uniqueKey("k").uniqueScope(UniqueScope.HANDLER).build());
        client.submit(SubmitRequest.builder(queue, "refund").payloadJson("{}").uniqueKey("k")
                .uniqueScope(UniqueScope.HANDLER).build());
        assertThrows(UniqueHeldException.class,
                () -> client.submit(task("{}").uniqueKey("k").uniqueScope(UniqueScope.HANDLER).build()));
        assertEquals(2, pending());
    }

    @Test
    @DisplayName("a batch decides its items in order: the second of two items with one key is UNIQUE_HELD naming the first")
    void batch_with_two_items_of_one_key() {
        List<SubmitResult> results = client.submitBatch(List.of(
                task("{\"n\":1}").uniqueKey("batch-key").uniqueHold(UniqueHold.UNTIL_SUCCEEDED).build(),
                task("{\"n\":2}").uniqueKey("batch-key").build(),
                task("{\"n\":3}").uniqueKey("other-key").build(),
                task("{\"n\":4}").build()));
        assertEquals(4, results.size());
        SubmitResult first = results.get(0);
        assertTrue(first.ok() && first.created(), first.toString());
        assertEquals(201, first.status());
        String holder = first.envelope().orElseThrow().id();

        SubmitResult second = results.get(1);
        assertFalse(second.ok());
        assertEquals(409, second.status());
        assertTrue(second.envelope().isEmpty());
        UniqueHeldException e = assertInstanceOf(UniqueHeldException.class, second.error().orElseThrow());
        assertEquals("UNIQUE_HELD", e.code());
        assertEquals(holder, e.holder());
        assertEquals("until_succeeded", e.hold().orElseThrow());
        assertThrows(UniqueHeldException.class, second::orThrow);

        assertTrue(results.get(2).created());
        assertTrue(results.get(3).created());
        assertEquals(3, pending());

        // A later batch's item replacing the waiting holder answers it (200, not created).
        SubmitResult replaced = client.submitBatch(List.of(task("{\"n\":5}").uniqueKey("batch-key")
                .uniqueOnConflict(UniqueConflict.REPLACE).build())).get(0);
        assertTrue(replaced.ok());
        assertFalse(replaced.created());
        assertEquals(200, replaced.status());
        assertEquals(holder, replaced.orThrow().id());
        assertEquals("{\"n\":5}", new String(replaced.orThrow().payload(), StandardCharsets.UTF_8));
    }

    @Test
    @DisplayName("bad input: key with key_from is refused before sending; what only the server knows comes back with its field")
    void bad_input() {
        RdqException both = assertThrows(RdqException.class,
                () -> client.submit(task("{\"a\":1}").uniqueKey("k").uniqueKeyFrom("/a").build()));
        assertEquals("INVALID_ARGUMENT", both.code());
        assertEquals("unique.key", both.field().orElseThrow());
        assertEquals(0, both.httpStatus(), "refused by the client");

        RdqException missing = assertThrows(RdqException.class,
                () -> client.submit(task("{\"a\":1}").uniqueKeyFrom("/b").build()));
        assertEquals("INVALID_ARGUMENT", missing.code());
        assertEquals("unique.key_from", missing.field().orElseThrow());
        assertEquals(400, missing.httpStatus());

        RdqException zero = assertThrows(RdqException.class,
                () -> client.submit(task("{}").uniqueKey("k").uniqueHoldFor(Duration.ZERO).build()));
        assertEquals("INVALID_ARGUMENT", zero.code());
        assertEquals("unique.hold_ms", zero.field().orElseThrow());

        RdqException control = assertThrows(RdqException.class,
                () -> client.submit(task("{}").uniqueKey("a\nb").build()));
        assertEquals("unique.key", control.field().orElseThrow());

        // In a batch, the bad item alone is refused.
        List<SubmitResult> results = client.submitBatch(List.of(task("{\"a\":1}").uniqueKeyFrom("/b").build(),
                task("{\"a\":1}").uniqueKeyFrom("/a").build()));
        assertEquals("INVALID_ARGUMENT", results.get(0).error().orElseThrow().code());
        assertEquals(400, results.get(0).status());
        assertTrue(results.get(1).created());
        assertEquals(1, pending());
    }

    @Test
    @DisplayName("a redrive of a dead task whose key another task holds is UNIQUE_HELD naming that task")
    void redrive_of_a_held_key() {
        Envelope dead = client.submit(task("{}").uniqueKey("k").build());
        client.cancel(queue, CancelFilter.ids(dead.id()));
        assertEquals(Status.DEAD, client.get(dead.id()).status());
        Envelope holder = client.submit(task("{}").uniqueKey("k").build());
        UniqueHeldException e = assertThrows(UniqueHeldException.class,
                () -> client.redrive(queue, List.of(dead.id()), null, null, false));
        assertEquals(holder.id(), e.holder());
        assertEquals(Status.DEAD, client.get(dead.id()).status());
    }

    @Test
    @DisplayName("submitAll carries the unique options too: one of two concurrent submits of a key is refused")
    void submit_all() {
        RdqException e = assertThrows(UniqueHeldException.class, () -> client.submitAll(List.of(
                task("{\"n\":1}").uniqueKey("k").build(), task("{\"n\":2}").uniqueKey("k").build()), 2));
        assertEquals("UNIQUE_HELD", e.code());
        assertEquals(1, pending());
    }
}
