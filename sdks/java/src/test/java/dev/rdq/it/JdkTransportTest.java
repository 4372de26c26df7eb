package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.json.JsonObject;
import dev.rdq.support.RdqServer;
import java.net.http.HttpClient;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** A client built with {@code httpClient(…)} sends everything through {@code java.net.http} and behaves the same. */
class JdkTransportTest {
    @Test
    @DisplayName("through java.net.http: submit, get, config, DLQ export and purge, and the server's codes")
    void the_same_client_over_java_net_http() {
        try (RdqServer server = RdqServer.embedded()) {
            RdqClient client = RdqClient.builder(server.url()).httpClient(HttpClient.newHttpClient()).build();
            Envelope env = client.submit(SubmitRequest.builder("jdk.q", "h").payloadJson("{\"via\":\"jdk\"}").build());
            assertEquals(env.id(), client.get(env.id()).id());
            JsonObject policy = client.updateQueueConfig("jdk.q", JsonObject.builder().put("max_attempts", 7).build());
            assertEquals(7L, policy.integer("max_attempts").orElseThrow());
            assertTrue(client.queues().stream().anyMatch(q -> q.queue().equals("jdk.q") && q.pending() == 1));
            assertEquals(0, client.exportDead("jdk.q", null).size());
            assertEquals(0L, client.purgeDead("jdk.q", true));
            RdqException missing = assertThrows(RdqException.class, () -> client.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0"));
            assertEquals("TASK_NOT_FOUND", missing.code());
            assertEquals(404, missing.httpStatus());
        }
    }
}
