package dev.rdq.it;

import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.json.Json;
import dev.rdq.json.JsonObject;
import dev.rdq.support.Await;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.function.Predicate;

/** Small helpers shared by the end-to-end tests. */
final class Support {
    private Support() {}

    static Envelope submit(RdqClient c, String queue, String handler, String payload) {
        return c.submit(SubmitRequest.builder(queue, handler).payload(payload.getBytes(StandardCharsets.UTF_8)).build());
    }

    static Envelope awaitTask(RdqClient c, String id, String what, Predicate<Envelope> p) {
        return Await.until(what + " (" + id + ")", Duration.ofSeconds(60), () -> {
            Envelope e = c.get(id);
            return p.test(e) ? e : null;
        });
    }

    /** A policy that keeps a retried task from running again during the test. */
    static void slowRetries(RdqClient c, String queue, String extraJson) {
        String doc = "{\"backoff\":{\"kind\":\"fixed\",\"delay_ms\":600000},\"max_attempts\":5"
                + (extraJson.isEmpty() ? "" : "," + extraJson) + "}";
        try {
            c.updateQueueConfig(queue, (JsonObject) Json.parse(doc));
        } catch (dev.rdq.json.JsonSyntaxException e) {
            throw new IllegalArgumentException(e);
        }
    }
}
