package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SourceStatus;
import dev.rdq.support.Await;
import dev.rdq.support.RdqServer;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Locale;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Sources against a real {@code rdq serve --config FILE} with two {@code
 * [[sources]]} tables whose servers cannot be reached, a NATS JetStream
 * stream and an SQS queue: the server runs them anyway, and each shows how
 * it stands.
 */
@DisplayName("sources of a running server")
class SourceTest {
    static String config(String natsName, String sqsName, String queue) {
        return """
                [[sources]]
                name = "%1$s"
                queue = "%3$s"
                handler = "audit.record"
                retry_ms = 100

                [sources.nats]
                url = "nats://127.0.0.1:1"
                stream = "AUDIT"

                [[sources]]
                name = "%2$s"
                queue = "%3$s"
                handler = "invoice.issue"

                [sources.sqs]
                queue_url = "http://127.0.0.1:1/000000000000/invoices"
                endpoint = "http://127.0.0.1:1"
                access_key_id = "test"
                secret_access_key = "test"
                """.formatted(natsName, sqsName, queue);
    }

    static String suffix() {
        return Long.toHexString(System.nanoTime()).toLowerCase(Locale.ROOT);
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(value = RdqServer.Store.class, names = {"EMBEDDED", "POSTGRES"})
    @DisplayName("list, get, an unknown name, and a reset of cursors the store keeps")
    void sources(RdqServer.Store store) {
        String queue = "sources-" + suffix();
        String natsName = "audit." + suffix();
        String sqsName = "invoices." + suffix();
        try (RdqServer server = RdqServer.start(store, config(natsName, sqsName, queue));
                RdqClient client = server.client()) {
            List<SourceStatus> all = client.listSources();
            assertEquals(List.of(natsName, sqsName), all.stream().map(SourceStatus::name).toList(), "by name");
            assertEquals(List.of(SourceStatus.Kind.NATS, SourceStatus.Kind.SQS),
                    all.stream().map(SourceStatus::kind).toList());
            for (SourceStatus s : all) {
                assertEquals(queue, s.queue());
                assertFalse(s.paused());
                assertTrue(s.lag().isEmpty(), "never measured: " + s);
                assertEquals(0, s.ingested() + s.dead() + s.duplicates());
                assertEquals(0.0, s.rate());
            }
            assertFalse(all.get(1).cursorsInStore(), "SQS keeps no cursor on any store");

            // The NATS source cannot connect: it shows its error and tries again.
            Instant before = Instant.now().minusSeconds(60);
            SourceStatus nats = Await.until("the NATS source's error", Duration.ofSeconds(60), () -> {
                SourceStatus s = client.getSource(natsName);
                return s.lastError().isPresent() ? s : null;
            });
            assertEquals(natsName, nats.name());
            assertEquals(SourceStatus.Kind.NATS, nats.kind());
            assertEquals(queue, nats.queue());
            assertTrue(nats.state() == SourceStatus.State.RETRYING || nats.state() == SourceStatus.State.STARTING,
                    nats.toString());
            assertTrue(nats.lastError().get().contains(natsName), nats.toString());
            Instant at = nats.lastErrorAt().orElseThrow();
            assertTrue(at.isAfter(before) && at.isBefore(Instant.now().plusSeconds(60)), at.toString());

            SourceStatus sqs = client.getSource(sqsName);
            assertEquals(sqsName, sqs.name());
            assertEquals(SourceStatus.Kind.SQS, sqs.kind());

            RdqException e = assertThrows(RdqException.class, () -> client.getSource("no-such-source"));
            assertEquals("SOURCE_NOT_FOUND", e.code());
            assertEquals(404, e.httpStatus());

            // These stores keep cursors; these sources have none yet. A
            // source the server does not run can be reset too.
            for (String name : List.of(natsName, sqsName, "no-such-source")) {
                assertEquals(0, client.resetSourceCursors(name), name);
            }
            assertEquals(natsName, client.getSource(natsName).name());
        }
    }
}
