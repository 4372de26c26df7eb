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
import dev.rdq.client.JdkHttpTransport;
import dev.rdq.client.Transport;
import java.io.IOException;
import java.net.http.HttpClient;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
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

    /** A user's transport: records each request, then sends it through the JDK's client. */
    static final class RecordingTransport implements Transport {
        final List<Transport.Request> seen = new CopyOnWriteArrayList<>();
        final Transport inner = new JdkHttpTransport(HttpClient.newHttpClient());

        @Override
        public Response send(Request request) throws IOException, InterruptedException {
            seen.add(request);
            return inner.send(request);
        }

        @Override
        public StreamedResponse open(Request request) throws IOException, InterruptedException {
            seen.add(request);
            return inner.open(request);
        }

        @Override
        public void close() {}
    }

    @Test
    @DisplayName("a Transport of the user's carries every request, with the token and traceparent the client wrote")
    void a_pluggable_transport() {
        try (RdqServer server = RdqServer.embedded()) {
            RecordingTransport t = new RecordingTransport();
            RdqClient client = RdqClient.builder(server.url()).token("tok-123").transport(t).build();
            String tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
            Envelope env = client.submit(SubmitRequest.builder("plug.q", "h").header("traceparent", tp).payloadJson("1").build());
            client.get(env.id());
            assertEquals(2, t.seen.size());
            Transport.Request submit = t.seen.get(0);
            assertEquals("POST", submit.method());
            assertEquals(server.url().resolve("/v1/tasks"), submit.uri());
            assertEquals("Bearer tok-123", submit.headers().get("authorization"));
            assertEquals("application/json", submit.headers().get("content-type"));
            assertEquals("GET", t.seen.get(1).method());
            assertEquals(server.url().resolve("/v1/tasks/" + env.id()), t.seen.get(1).uri());
        }
    }

    /** A transport that fails every request with {@code e}. */
    static Transport failing(IOException e) {
        return new Transport() {
            @Override
            public Response send(Request request) throws IOException {
                throw e;
            }

            @Override
            public StreamedResponse open(Request request) throws IOException {
                throw e;
            }

            @Override
            public void close() {}
        };
    }

    @Test
    @DisplayName("a transport's IOExceptions become the client's stable codes: CONNECTION_FAILED, TIMEOUT")
    void transport_failures_become_codes() {
        RdqClient refused = RdqClient.builder("http://127.0.0.1:1").transport(failing(new java.net.ConnectException("refused"))).build();
        assertEquals(RdqException.CONNECTION_FAILED, assertThrows(RdqException.class, () -> refused.get("x")).code());
        RdqClient slow = RdqClient.builder("http://127.0.0.1:1")
                .transport(failing(new java.net.http.HttpTimeoutException("slow"))).build();
        assertEquals(RdqException.TIMEOUT, assertThrows(RdqException.class, () -> slow.get("x")).code());
        RdqClient broken = RdqClient.builder("http://127.0.0.1:1").transport(failing(new IOException("reset"))).build();
        assertEquals(RdqException.CONNECTION_FAILED, assertThrows(RdqException.class, () -> broken.get("x")).code());
    }
}
