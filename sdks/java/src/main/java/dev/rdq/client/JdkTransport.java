package dev.rdq.client;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

/** {@link Transport} over a caller's {@link HttpClient} ({@link RdqClient.Builder#httpClient}). */
final class JdkTransport implements Transport {
    private final HttpClient http;
    private final String base;
    private final String authorization;

    JdkTransport(HttpClient http, String base, String authorization) {
        this.http = http;
        this.base = base;
        this.authorization = authorization;
    }

    @Override
    public Reply send(Call call) throws IOException, InterruptedException {
        HttpResponse<byte[]> r = http.send(request(call), HttpResponse.BodyHandlers.ofByteArray());
        return new Reply(r.statusCode(), r.body());
    }

    @Override
    public Streamed open(Call call) throws IOException, InterruptedException {
        HttpResponse<InputStream> r = http.send(request(call), HttpResponse.BodyHandlers.ofInputStream());
        return new Streamed(r.statusCode(), r.body());
    }

    private HttpRequest request(Call call) {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + call.target()))
                .timeout(call.timeout())
                .header("accept", "application/json");
        if (authorization != null) {
            b.header("authorization", authorization);
        }
        if (call.traceparent() != null) {
            b.header("traceparent", call.traceparent());
        }
        if (call.body() != null) {
            b.header("content-type", "application/json");
            b.method(call.method(), HttpRequest.BodyPublishers.ofByteArray(call.body()));
        } else {
            b.method(call.method(), HttpRequest.BodyPublishers.noBody());
        }
        return b.build();
    }

    @Override
    public void close() {
        // The caller owns the HttpClient.
    }
}
