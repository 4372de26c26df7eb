package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.client.RdqClient;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.Status;
import dev.rdq.support.RdqServer;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.Parameter;
import org.junit.jupiter.params.ParameterizedClass;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A running task cancelled by a named token (an operator), its worker on
 * another token: the handler, the recorded error and the dead reason all
 * name the canceller.
 */
@DisplayName("cancelling a running task with a token")
@ParameterizedClass(name = "worker over {0}")
@EnumSource(value = WorkerTransport.class, names = {"GRPC", "HTTP"})
class CancelRunningAuthTest {
    static final String OPS = "a-long-ops-secret-0123456789";
    static final String WORK = "a-long-work-secret-0123456789";
    static final String CONFIG = "[[tokens]]\nname = \"ops\"\ntoken = \"" + OPS + "\"\nscopes = [\"admin\"]\n"
            + "[[tokens]]\nname = \"billing-worker\"\ntoken = \"" + WORK + "\"\nscopes = [\"submit\", \"work\"]\n";

    @Parameter
    WorkerTransport transport;

    @Test
    @DisplayName("the handler learns who cancelled; the task ends DEAD with reason CANCELLED by that token's name")
    void cancelled_by_a_named_token() throws Exception {
        try (RdqServer server = RdqServer.start(RdqServer.Store.EMBEDDED, CONFIG);
                RdqClient ops = RdqClient.builder(server.url()).token(OPS).build();
                RdqClient work = RdqClient.builder(server.url()).token(WORK).build()) {
            CountDownLatch started = new CountDownLatch(1);
            BlockingQueue<String> seen = new LinkedBlockingQueue<>();
            String id = Support.submit(work, "billing", "charge", "{}").id();
            try (Worker w = Worker.builder(work).transport(transport).leaseMs(1500).shutdownGrace(Duration.ofSeconds(2))
                    .handler("billing", "charge", task -> {
                        started.countDown();
                        try {
                            Thread.sleep(60_000);
                        } catch (InterruptedException e) {
                            seen.add(EndToEndTests.cancellation());
                            throw e;
                        }
                    })
                    .start()) {
                assertEquals(transport, w.transport());
                assertTrue(started.await(60, TimeUnit.SECONDS), "the handler did not start");
                assertEquals(List.of(id), EndToEndTests.cancelRunning(ops, "billing", id, "card reported stolen").running());
                assertEquals("true CANCEL_REQUESTED cancelled by ops: card reported stolen", seen.poll(30, TimeUnit.SECONDS));
                Envelope dead = Support.awaitTask(work, id, "dead", e -> e.status() == Status.DEAD);
                assertEquals("CANCELLED", dead.deadReason().orElseThrow().code());
                assertEquals("ops", dead.deadReason().orElseThrow().by());
                assertEquals("ops", dead.cancelRequested().orElseThrow().by());
                assertEquals("rdq.Cancelled", dead.lastError().orElseThrow().type());
                assertEquals("cancelled by ops: card reported stolen", dead.lastError().orElseThrow().message());
                assertEquals(1, dead.attempts().size());
            }
        }
    }
}
