package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.rdq.client.RdqClient;
import dev.rdq.envelope.Status;
import dev.rdq.support.RdqServer;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** A worker in front of a server that answers HTTP but no gRPC falls back to HTTP on its own. */
class TransportFallbackTest {

    /** An HTTP/1.1-only reverse proxy (the JDK's HttpServer): what a plain HTTP load balancer looks like. */
    static HttpServer http1Proxy(URI upstream) throws IOException {
        HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        HttpServer proxy = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        proxy.createContext("/", (HttpExchange ex) -> {
            try (ex) {
                byte[] body;
                try (InputStream in = ex.getRequestBody()) {
                    body = in.readAllBytes();
                }
                HttpRequest.Builder b = HttpRequest.newBuilder(upstream.resolve(ex.getRequestURI().toString()))
                        .method(ex.getRequestMethod(), HttpRequest.BodyPublishers.ofByteArray(body));
                for (String h : List.of("authorization", "content-type", "traceparent", "accept")) {
                    String v = ex.getRequestHeaders().getFirst(h);
                    if (v != null) {
                        b.header(h, v);
                    }
                }
                HttpResponse<byte[]> r = http.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
                r.headers().firstValue("content-type").ifPresent(v -> ex.getResponseHeaders().set("content-type", v));
                ex.sendResponseHeaders(r.statusCode(), r.body().length == 0 ? -1 : r.body().length);
                try (OutputStream out = ex.getResponseBody()) {
                    out.write(r.body());
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        proxy.start();
        return proxy;
    }

    @Test
    @DisplayName("AUTO: no gRPC on the address but HTTP answers, so the worker claims and settles over HTTP")
    void auto_falls_back_to_http() throws Exception {
        try (RdqServer server = RdqServer.embedded()) {
            HttpServer proxy = http1Proxy(server.url());
            try {
                RdqClient client = RdqClient.builder("http://127.0.0.1:" + proxy.getAddress().getPort()).build();
                String id = Support.submit(client, "fallback.q", "h", "x").id();
                try (Worker w = Worker.builder(client).handler("fallback.q", "h", task -> {}).start()) {
                    assertEquals(WorkerTransport.HTTP, w.transport());
                    Support.awaitTask(client, id, "succeeded", e -> e.status() == Status.SUCCEEDED);
                }
            } finally {
                proxy.stop(0);
            }
        }
    }

    @Test
    @DisplayName("AUTO against rdq serve itself takes the Work stream")
    void auto_takes_grpc_where_it_answers() {
        try (RdqServer server = RdqServer.embedded()) {
            RdqClient client = server.client();
            String id = Support.submit(client, "auto.q", "h", "x").id();
            try (Worker w = Worker.builder(client).handler("auto.q", "h", task -> {}).start()) {
                assertEquals(WorkerTransport.GRPC, w.transport());
                Support.awaitTask(client, id, "succeeded", e -> e.status() == Status.SUCCEEDED);
            }
        }
    }
}
