package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.support.RdqServer;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * Requests over the server's limits: the server's refusal is what the caller
 * gets, or a broken connection where the server stops reading a body over its
 * request limit, and the client goes on working.
 */
class LargeRequestTest {
    @Test
    @DisplayName("a task over the envelope limit and a body over the request limit are PAYLOAD_TOO_LARGE (413), nothing is stored")
    void oversized_submits_are_refused_with_the_servers_code() {
        try (RdqServer server = RdqServer.embedded()) {
            RdqClient client = server.client();
            // 2 MiB: read whole by the server, refused as an envelope over 1 MiB.
            for (int i = 0; i < 2; i++) {
                SubmitRequest big = SubmitRequest.builder("large.q", "h").payload(new byte[2 * 1024 * 1024]).build();
                RdqException e = assertThrows(RdqException.class, () -> client.submit(big));
                assertEquals("PAYLOAD_TOO_LARGE", e.code(), e.getMessage());
                assertEquals(413, e.httpStatus());
            }
            // 8 and 32 MiB: over max_request_bytes; the server answers 413 and
            // closes without reading the rest, which java.net.http may see as a
            // broken connection while it still writes (docs/sdk-java.md, "Transport").
            for (int mib : new int[] {8, 32}) {
                SubmitRequest big = SubmitRequest.builder("large.q", "h").payload(new byte[mib * 1024 * 1024]).build();
                RdqException e = assertThrows(RdqException.class, () -> client.submit(big), mib + " MiB");
                assertTrue(e.code().equals("PAYLOAD_TOO_LARGE") && e.httpStatus() == 413
                        || e.code().equals(RdqException.CONNECTION_FAILED), mib + " MiB: " + e.getMessage());
            }
            Envelope small = client.submit(SubmitRequest.builder("large.q", "h").payloadJson("{}").build());
            assertEquals(small.id(), client.get(small.id()).id());
            assertEquals(1L, client.queues().stream().filter(q -> q.queue().equals("large.q")).findFirst().orElseThrow().pending());
        }
    }
}
