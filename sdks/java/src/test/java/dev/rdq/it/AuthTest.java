package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.support.RdqServer;
import org.junit.jupiter.api.DisplayName;
import dev.rdq.envelope.Status;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;
import org.junit.jupiter.api.Test;

class AuthTest {
    @Test
    @DisplayName("the bearer token is sent; without it the server answers UNAUTHENTICATED, with too few scopes FORBIDDEN")
    void bearer_token() {
        String config = "[[tokens]]\nname = \"java-sdk\"\ntoken = \"a-long-test-secret-0123456789\"\nscopes = [\"submit\"]\n";
        try (RdqServer server = RdqServer.start(RdqServer.Store.EMBEDDED, config)) {
            SubmitRequest req = SubmitRequest.builder("auth.q", "h").build();
            RdqException none = assertThrows(RdqException.class, () -> server.client().submit(req), server::log);
            assertEquals("UNAUTHENTICATED", none.code());
            assertEquals(401, none.httpStatus());
            RdqClient authed = RdqClient.builder(server.url()).token("a-long-test-secret-0123456789").build();
            Envelope env = authed.submit(req);
            assertEquals("java-sdk", env.header("rdq.submitted_by").orElseThrow());
            // Any scope reads a queue; changing it needs admin.
            authed.queueConfig("auth.q");
            assertEquals("FORBIDDEN", assertThrows(RdqException.class, () -> authed.purgeDead("auth.q", true)).code());
        }
    }

    @Test
    @DisplayName("an rdq.-prefixed header, in any case, is refused before any request is made")
    void reserved_header_refused_client_side() {
        for (String key : new String[] {"rdq.source", "RDQ.x", "Rdq.Submitted_By"}) {
            RdqException e = assertThrows(RdqException.class,
                    () -> SubmitRequest.builder("q", "h").header(key, "v").build());
            assertEquals("RESERVED_HEADER", e.code());
            assertEquals("headers." + key, e.field().orElseThrow());
        }
        assertEquals("INVALID_QUEUE_NAME", assertThrows(RdqException.class,
                () -> SubmitRequest.builder("Bad Queue", "h").build()).code());
        assertEquals("INVALID_HANDLER_REF", assertThrows(RdqException.class,
                () -> SubmitRequest.builder("q", "my::Handler").build()).code());
    }

    @Test
    @DisplayName("a worker on the Work stream sends the token as authorization metadata; the stream's tasks run")
    void grpc_worker_sends_the_token() throws Exception {
        String config = "[[tokens]]\nname = \"worker\"\ntoken = \"a-long-work-secret-0123456789\"\nscopes = [\"submit\", \"work\"]\n";
        try (RdqServer server = RdqServer.start(RdqServer.Store.EMBEDDED, config)) {
            RdqClient authed = RdqClient.builder(server.url()).token("a-long-work-secret-0123456789").build();
            String id = authed.submit(SubmitRequest.builder("auth.q", "h").build()).id();
            try (Worker w = Worker.builder(authed).handler("auth.q", "h", task -> {}).start()) {
                assertEquals(WorkerTransport.GRPC, w.transport());
                Envelope done = Support.awaitTask(authed, id, "succeeded", e -> e.status() == Status.SUCCEEDED);
                assertEquals(1, done.attempts().size());
            }
        }
    }
}
