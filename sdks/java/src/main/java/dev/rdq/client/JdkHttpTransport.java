package dev.rdq.client;

import java.io.IOException;
import java.io.InputStream;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import javax.net.ssl.SSLContext;

/**
 * The default {@link Transport}: the JDK's {@link HttpClient}. Over
 * {@code https://} it offers HTTP/2 by ALPN (one multiplexed connection) and
 * falls back to HTTP/1.1 when the server does not take it; over
 * {@code http://} it speaks HTTP/1.1 with a pool of kept-alive connections.
 */
public final class JdkHttpTransport implements Transport {
    /** Bodies larger than this are sent after the server's 100 Continue. */
    static final int EXPECT_CONTINUE_BYTES = 1024 * 1024;

    private final HttpClient http;
    private final boolean plainHttp1;

    /** A transport over {@code http}, which the caller keeps owning (its proxy, authenticator, version, TLS). */
    public JdkHttpTransport(HttpClient http) {
        this(http, false);
    }

    private JdkHttpTransport(HttpClient http, boolean plainHttp1) {
        this.http = Objects.requireNonNull(http, "http");
        this.plainHttp1 = plainHttp1;
    }

    /**
     * The transport {@link RdqClient} builds by default: {@code connectTimeout}
     * bounds the TCP connect and TLS handshake; {@code sslContext} (null for the
     * JDK's default) supplies the trust for {@code https://}.
     */
    public static JdkHttpTransport create(Duration connectTimeout, SSLContext sslContext) {
        HttpClient.Builder b = HttpClient.newBuilder()
                .connectTimeout(connectTimeout)
                // HTTP/2 where ALPN offers it (https://).
                .version(HttpClient.Version.HTTP_2)
                .followRedirects(HttpClient.Redirect.NEVER)
                // The client's own work (reading a whole answer into bytes, or
                // queueing it for an InputStream) never blocks, so it runs on
                // the client's selector thread rather than a pool: measured
                // here, half the CPU per submit of the default executor.
                .executor(Runnable::run);
        if (sslContext != null) {
            b.sslContext(sslContext);
        }
        return new JdkHttpTransport(b.build(), true);
    }

    @Override
    public Response send(Request request) throws IOException, InterruptedException {
        HttpResponse<byte[]> r = http.send(jdk(request), HttpResponse.BodyHandlers.ofByteArray());
        return new Response(r.statusCode(), r.body());
    }

    /** The JDK client's own asynchronous send: no thread waits for the answer. */
    @Override
    public CompletableFuture<Response> sendAsync(Request request, Executor executor) {
        return http.sendAsync(jdk(request), HttpResponse.BodyHandlers.ofByteArray())
                .thenApply(r -> new Response(r.statusCode(), r.body()));
    }

    @Override
    public StreamedResponse open(Request request) throws IOException, InterruptedException {
        HttpResponse<InputStream> r = http.send(jdk(request), HttpResponse.BodyHandlers.ofInputStream());
        return new StreamedResponse(r.statusCode(), r.body());
    }

    private HttpRequest jdk(Request request) {
        HttpRequest.Builder b = HttpRequest.newBuilder(request.uri()).timeout(request.timeout());
        if (plainHttp1 && "http".equalsIgnoreCase(request.uri().getScheme())) {
            // The JDK reaches HTTP/2 over cleartext only by an h2c upgrade, which
            // rdq serve (prior-knowledge h2c, for gRPC) does not offer.
            b.version(HttpClient.Version.HTTP_1_1);
        }
        for (Map.Entry<String, String> h : request.headers().entrySet()) {
            b.header(h.getKey(), h.getValue());
        }
        b.method(request.method(), request.body() == null ? HttpRequest.BodyPublishers.noBody()
                : HttpRequest.BodyPublishers.ofByteArray(request.body()));
        if (request.body() != null && request.body().length > EXPECT_CONTINUE_BYTES) {
            // rdq serve answers a body over its max_request_bytes with 413
            // and closes without reading the rest: asking first (Expect:
            // 100-continue) lets that answer arrive before the body is
            // written, where the server answers before it reads.
            b.expectContinue(true);
        }
        return b.build();
    }

    @Override
    public void close() {
        // HttpClient is closeable from JDK 21 only; its idle connections close with it unreachable.
    }
}
