package dev.rdq.client;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.Executor;

/**
 * How {@link RdqClient} exchanges one HTTP request for one answer. The default
 * is {@link JdkHttpTransport} ({@code java.net.http.HttpClient}); implement
 * this interface to send rdq's requests through another HTTP library, a proxy
 * layer or a test double ({@link RdqClient.Builder#transport(Transport)}).
 *
 * <p>The client builds every request completely (URL, headers with the bearer
 * token and {@code traceparent}, JSON body) and reads every answer itself, so
 * an implementation only moves bytes. It reports a failure to reach the server
 * as an {@link IOException}: {@link java.net.ConnectException} or {@link
 * java.net.http.HttpConnectTimeoutException} become {@code CONNECTION_FAILED},
 * {@link java.net.http.HttpTimeoutException} or {@link
 * java.net.SocketTimeoutException} {@code TIMEOUT}, any other {@code IOException}
 * {@code CONNECTION_FAILED}. An answer with any HTTP status is returned, not
 * thrown. Implementations must be thread-safe.
 */
public interface Transport extends AutoCloseable {

    /**
     * One request: {@code headers} are sent as given (names in lower case),
     * {@code body} is null for none, and {@code timeout} bounds the wait for
     * the answer.
     */
    record Request(String method, URI uri, Map<String, String> headers, byte[] body, Duration timeout) {
        public Request {
            Objects.requireNonNull(method, "method");
            Objects.requireNonNull(uri, "uri");
            headers = Map.copyOf(headers);
            Objects.requireNonNull(timeout, "timeout");
        }
    }

    /** A whole answer. */
    record Response(int status, byte[] body) {}

    /** An answer whose body is read as it arrives; closing the stream releases the connection. */
    record StreamedResponse(int status, InputStream body) {}

    /** Sends {@code request} and reads the whole answer. */
    Response send(Request request) throws IOException, InterruptedException;

    /**
     * Sends {@code request} without blocking the caller. The default runs
     * {@link #send} on {@code executor}; a transport with an asynchronous
     * client of its own answers from it. The future fails with the {@code
     * IOException} {@link #send} would throw.
     */
    default CompletableFuture<Response> sendAsync(Request request, Executor executor) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                return send(request);
            } catch (IOException e) {
                throw new CompletionException(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new CompletionException(e);
            }
        }, executor);
    }

    /** Sends {@code request} and answers as soon as the status is known. */
    StreamedResponse open(Request request) throws IOException, InterruptedException;

    /** Releases what the transport owns; calls in flight finish. */
    @Override
    void close();
}
