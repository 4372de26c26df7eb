package dev.rdq.client;

import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;

/**
 * How {@link RdqClient} exchanges one request for one answer: its own
 * HTTP/1.1 connection pool ({@link Http1Transport}, the default) or a
 * caller's {@link java.net.http.HttpClient} ({@link JdkTransport}).
 */
interface Transport extends AutoCloseable {

    /**
     * One request. {@code target} is the path and query under the client's
     * base URL; {@code body} is null for none; {@code traceparent} may be null.
     */
    record Call(String method, String target, byte[] body, String traceparent, Duration timeout) {}

    /** A whole answer. */
    record Reply(int status, byte[] body) {}

    /** An answer whose body is read as it arrives; closing it releases the connection. */
    record Streamed(int status, InputStream body) {}

    Reply send(Call call) throws IOException, InterruptedException;

    Streamed open(Call call) throws IOException, InterruptedException;

    /** Closes idle connections; calls in flight finish. */
    @Override
    void close();
}
