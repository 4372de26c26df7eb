package dev.rdq.client;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;

/**
 * The client's own HTTP/1.1 transport: a pool of kept-alive connections
 * over blocking sockets (TLS with hostname verification for {@code https}).
 * On loopback it carries several times the requests per second of {@code
 * java.net.http} for the same CPU ({@code docs/sdk-java.md}, "Transport").
 *
 * <p>A connection is reused while the server keeps it open and it has been
 * idle less than the idle timeout. A request that fails on a reused
 * connection before a single byte of the answer arrived is sent once more on
 * a new connection: the server closes only connections with no request in
 * flight, so such a request was never processed. The request timeout bounds
 * every wait for the server's bytes.
 */
final class Http1Transport implements Transport {
    private static final int MAX_LINE = 64 * 1024;
    private static final int MAX_HEADERS = 256;
    private static final int MAX_IDLE = 256;

    /** A failure to open a connection (refused, unreachable, TLS handshake). */
    static final class ConnectFailed extends IOException {
        private static final long serialVersionUID = 1L;

        ConnectFailed(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /** An answer that is not well-formed HTTP/1.1. */
    static final class Malformed extends IOException {
        private static final long serialVersionUID = 1L;

        Malformed(String message) {
            super(message);
        }

        Malformed(String message, Throwable cause) {
            super(message, cause);
        }
    }

    private final String host;
    private final int port;
    private final String hostHeader;
    private final String basePath;
    private final SSLSocketFactory tls;
    private final String authorization;
    private final int connectTimeoutMs;
    private final long idleNanos;
    private final ArrayDeque<Conn> idle = new ArrayDeque<>();
    private boolean closed;

    Http1Transport(URI base, String authorization, Duration connectTimeout, Duration idleTimeout, SSLContext ssl) {
        String scheme = base.getScheme() == null ? "" : base.getScheme().toLowerCase(java.util.Locale.ROOT);
        if (!scheme.equals("http") && !scheme.equals("https")) {
            throw new IllegalArgumentException("the base URL must be http:// or https://, not " + base);
        }
        if (base.getHost() == null) {
            throw new IllegalArgumentException("the base URL has no host: " + base);
        }
        boolean secure = scheme.equals("https");
        String h = base.getHost();
        this.host = h.startsWith("[") && h.endsWith("]") ? h.substring(1, h.length() - 1) : h;
        this.port = base.getPort() >= 0 ? base.getPort() : secure ? 443 : 80;
        this.hostHeader = base.getPort() >= 0 ? h + ":" + base.getPort() : h;
        String path = base.getRawPath() == null ? "" : base.getRawPath();
        this.basePath = path.endsWith("/") ? path.substring(0, path.length() - 1) : path;
        this.tls = secure ? (ssl != null ? ssl : defaultContext()).getSocketFactory() : null;
        this.authorization = authorization;
        this.connectTimeoutMs = millis(connectTimeout);
        this.idleNanos = idleTimeout.toNanos();
    }

    private static SSLContext defaultContext() {
        try {
            return SSLContext.getDefault();
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException("no default TLS context", e);
        }
    }

    private static int millis(Duration d) {
        long ms = d.toMillis();
        return ms <= 0 ? 1 : ms > Integer.MAX_VALUE ? Integer.MAX_VALUE : (int) ms;
    }

    @Override
    public Reply send(Call call) throws IOException, InterruptedException {
        Conn c = begin(call);
        byte[] body;
        try {
            body = c.readBody();
        } catch (IOException | RuntimeException e) {
            c.closeQuietly();
            throw e;
        }
        release(c);
        return new Reply(c.status, body);
    }

    @Override
    public Streamed open(Call call) throws IOException, InterruptedException {
        Conn c = begin(call);
        return new Streamed(c.status, new BodyStream(c));
    }

    @Override
    public void close() {
        synchronized (idle) {
            closed = true;
            while (!idle.isEmpty()) {
                idle.pollFirst().closeQuietly();
            }
        }
    }

    /** Sends the request and reads the answer's head, leaving the body to read. */
    private Conn begin(Call call) throws IOException, InterruptedException {
        byte[] request = encode(call);
        for (int attempt = 0;; attempt++) {
            if (Thread.currentThread().isInterrupted()) {
                throw new InterruptedException("interrupted before sending");
            }
            Conn c = pooled();
            boolean reused = c != null;
            if (c == null) {
                c = connect();
            }
            try {
                c.received = 0;
                c.socket.setSoTimeout(millis(call.timeout()));
                boolean whole = write(c, request);
                c.readHead();
                if (!whole) {
                    // Answered before the whole request was sent: the
                    // connection is out of step and cannot carry another.
                    c.reusable = false;
                }
                return c;
            } catch (IOException | RuntimeException e) {
                c.closeQuietly();
                boolean neverAnswered = c.received == 0 && !(e instanceof SocketTimeoutException);
                if (reused && neverAnswered && attempt == 0 && e instanceof IOException) {
                    continue;
                }
                throw e;
            }
        }
    }

    /** Bytes of a request written between looks for an early answer. */
    private static final int WRITE_CHUNK = 64 * 1024;

    /**
     * Writes the request; false when the server answered before all of it
     * was written (a server refusing a body over its limit answers 413 at
     * once and stops reading). A write the server cut short is not a
     * failure if its answer can be read: that answer is the outcome.
     */
    private static boolean write(Conn c, byte[] request) throws IOException {
        try {
            for (int off = 0; off < request.length;) {
                int n = Math.min(WRITE_CHUNK, request.length - off);
                c.out.write(request, off, n);
                off += n;
                if (off < request.length && c.in.available() > 0) {
                    return false;
                }
            }
            c.out.flush();
            return true;
        } catch (IOException writeFailed) {
            if (c.pos < c.lim || c.in.available() > 0) {
                return false;
            }
            throw writeFailed;
        }
    }

    private byte[] encode(Call call) {
        StringBuilder b = new StringBuilder(256);
        String target = basePath + call.target();
        for (int i = 0; i < target.length(); i++) {
            char ch = target.charAt(i);
            if (ch <= 0x20 || ch >= 0x7f) {
                throw new IllegalArgumentException("not a request target: " + target);
            }
        }
        b.append(call.method()).append(' ').append(target).append(" HTTP/1.1\r\nhost: ").append(hostHeader)
                .append("\r\naccept: application/json\r\n");
        if (authorization != null) {
            b.append("authorization: ").append(authorization).append("\r\n");
        }
        if (call.traceparent() != null) {
            b.append("traceparent: ").append(call.traceparent()).append("\r\n");
        }
        byte[] body = call.body();
        if (body != null) {
            b.append("content-type: application/json\r\ncontent-length: ").append(body.length).append("\r\n");
        } else if (call.method().equals("POST") || call.method().equals("PUT")) {
            b.append("content-length: 0\r\n");
        }
        b.append("\r\n");
        byte[] head = b.toString().getBytes(StandardCharsets.ISO_8859_1);
        if (body == null || body.length == 0) {
            return head;
        }
        byte[] all = new byte[head.length + body.length];
        System.arraycopy(head, 0, all, 0, head.length);
        System.arraycopy(body, 0, all, head.length, body.length);
        return all;
    }

    private Conn pooled() {
        long now = System.nanoTime();
        synchronized (idle) {
            while (!idle.isEmpty() && now - idle.peekFirst().idleSince >= idleNanos) {
                idle.pollFirst().closeQuietly();
            }
            return idle.pollLast();
        }
    }

    private void release(Conn c) {
        if (!c.reusable || c.pos < c.lim) {
            c.closeQuietly();
            return;
        }
        c.idleSince = System.nanoTime();
        synchronized (idle) {
            if (!closed && idle.size() < MAX_IDLE) {
                idle.addLast(c);
                return;
            }
        }
        c.closeQuietly();
    }

    private Conn connect() throws IOException {
        Socket s = new Socket();
        try {
            s.setTcpNoDelay(true);
            s.connect(new InetSocketAddress(host, port), connectTimeoutMs);
            if (tls != null) {
                SSLSocket ss = (SSLSocket) tls.createSocket(s, host, port, true);
                SSLParameters p = ss.getSSLParameters();
                p.setEndpointIdentificationAlgorithm("HTTPS");
                p.setApplicationProtocols(new String[] {"http/1.1"});
                ss.setSSLParameters(p);
                ss.setSoTimeout(connectTimeoutMs);
                ss.startHandshake();
                s = ss;
            }
            return new Conn(s);
        } catch (IOException e) {
            try {
                s.close();
            } catch (IOException ignored) {
                // Already failing.
            }
            String what = e instanceof SocketTimeoutException ? "connect timed out" : "could not connect";
            throw new ConnectFailed(what + " to " + host + ":" + port + ": " + e.getMessage(), e);
        }
    }

    /** One connection and the answer being read on it. */
    private static final class Conn {
        final Socket socket;
        final InputStream in;
        final OutputStream out;
        final byte[] buf = new byte[16 * 1024];
        int pos;
        int lim;
        long received;
        long idleSince;
        int status;
        boolean reusable;
        boolean chunked;
        long remaining; // bytes left in the body (LENGTH) or in the current chunk; -1: until close
        boolean done;

        Conn(Socket socket) throws IOException {
            this.socket = socket;
            this.in = socket.getInputStream();
            this.out = socket.getOutputStream();
        }

        void closeQuietly() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // Nothing to do.
            }
        }

        /** Refills the buffer; false at the end of the stream. */
        private boolean fill() throws IOException {
            int n = in.read(buf, 0, buf.length);
            if (n < 0) {
                return false;
            }
            pos = 0;
            lim = n;
            received += n;
            return true;
        }

        private String line() throws IOException {
            StringBuilder sb = null;
            while (true) {
                if (pos == lim && !fill()) {
                    throw new EOFException(received == 0 ? "the server closed the connection without answering"
                            : "the server closed the connection mid-answer");
                }
                int start = pos;
                while (pos < lim && buf[pos] != '\n') {
                    pos++;
                }
                int len = pos - start;
                if ((sb == null ? 0 : sb.length()) + len > MAX_LINE) {
                    throw new Malformed("an answer line longer than " + MAX_LINE + " bytes");
                }
                if (pos < lim) {
                    pos++; // the '\n'
                    if (sb == null) {
                        int end = len > 0 && buf[start + len - 1] == '\r' ? len - 1 : len;
                        return new String(buf, start, end, StandardCharsets.ISO_8859_1);
                    }
                    sb.append(new String(buf, start, len, StandardCharsets.ISO_8859_1));
                    int end = sb.length() > 0 && sb.charAt(sb.length() - 1) == '\r' ? sb.length() - 1 : sb.length();
                    return sb.substring(0, end);
                }
                if (sb == null) {
                    sb = new StringBuilder(len + 64);
                }
                sb.append(new String(buf, start, len, StandardCharsets.ISO_8859_1));
            }
        }

        void readHead() throws IOException {
            while (true) {
                String statusLine = line();
                if (!statusLine.startsWith("HTTP/1.") || statusLine.length() < 12 || statusLine.charAt(8) != ' ') {
                    throw new Malformed("not an HTTP/1.x answer: " + abbreviate(statusLine));
                }
                int code = parseStatus(statusLine);
                boolean http10 = statusLine.charAt(7) == '0';
                long length = -1;
                boolean isChunked = false;
                boolean close = http10;
                for (int n = 0;; n++) {
                    String h = line();
                    if (h.isEmpty()) {
                        break;
                    }
                    if (n >= MAX_HEADERS) {
                        throw new Malformed("an answer with more than " + MAX_HEADERS + " header lines");
                    }
                    int colon = h.indexOf(':');
                    if (colon <= 0) {
                        throw new Malformed("a malformed answer header: " + abbreviate(h));
                    }
                    String name = h.substring(0, colon).trim();
                    String value = h.substring(colon + 1).trim();
                    if (name.equalsIgnoreCase("content-length")) {
                        long v = parseLength(value);
                        if (length >= 0 && length != v) {
                            throw new Malformed("an answer with conflicting content-length headers");
                        }
                        length = v;
                    } else if (name.equalsIgnoreCase("transfer-encoding")) {
                        isChunked = value.toLowerCase(java.util.Locale.ROOT).endsWith("chunked");
                    } else if (name.equalsIgnoreCase("connection")) {
                        String v = value.toLowerCase(java.util.Locale.ROOT);
                        if (v.contains("close")) {
                            close = true;
                        } else if (v.contains("keep-alive")) {
                            close = false;
                        }
                    }
                }
                if (code >= 100 && code < 200 && code != 101) {
                    continue; // an interim answer; the real one follows
                }
                status = code;
                chunked = isChunked;
                if (chunked) {
                    remaining = 0;
                } else if (length >= 0) {
                    remaining = length;
                } else if (code == 204 || code == 304) {
                    remaining = 0;
                } else {
                    remaining = -1;
                    close = true;
                }
                done = !chunked && remaining == 0;
                reusable = !close;
                return;
            }
        }

        private static int parseStatus(String line) throws IOException {
            int code = 0;
            for (int i = 9; i < 12; i++) {
                char ch = line.charAt(i);
                if (ch < '0' || ch > '9') {
                    throw new Malformed("not an HTTP status: " + abbreviate(line));
                }
                code = code * 10 + (ch - '0');
            }
            return code;
        }

        private static long parseLength(String v) throws IOException {
            if (v.isEmpty() || v.length() > 18) {
                throw new Malformed("a malformed content-length: " + abbreviate(v));
            }
            long n = 0;
            for (int i = 0; i < v.length(); i++) {
                char ch = v.charAt(i);
                if (ch < '0' || ch > '9') {
                    throw new Malformed("a malformed content-length: " + abbreviate(v));
                }
                n = n * 10 + (ch - '0');
            }
            return n;
        }

        private static String abbreviate(String s) {
            return s.length() <= 80 ? s : s.substring(0, 80) + "…";
        }

        /** Reads body bytes into {@code dst}; -1 at the end of the body. */
        int read(byte[] dst, int off, int len) throws IOException {
            if (done || len == 0) {
                return done ? -1 : 0;
            }
            if (chunked && remaining == 0) {
                if (!nextChunk()) {
                    return -1;
                }
            }
            if (pos == lim && !fill()) {
                if (remaining < 0) {
                    done = true;
                    return -1;
                }
                throw new EOFException("the server closed the connection mid-answer");
            }
            int n = Math.min(len, lim - pos);
            if (remaining >= 0) {
                n = (int) Math.min(n, remaining);
            }
            System.arraycopy(buf, pos, dst, off, n);
            pos += n;
            if (remaining >= 0) {
                remaining -= n;
                if (remaining == 0 && !chunked) {
                    done = true;
                } else if (remaining == 0) {
                    String end = line();
                    if (!end.isEmpty()) {
                        throw new Malformed("a chunk not followed by CRLF");
                    }
                }
            }
            return n;
        }

        /** Starts the next chunk; false after the last one (and its trailers). */
        private boolean nextChunk() throws IOException {
            String sizeLine = line();
            int semi = sizeLine.indexOf(';');
            String hex = (semi >= 0 ? sizeLine.substring(0, semi) : sizeLine).trim();
            if (hex.isEmpty() || hex.length() > 15) {
                throw new Malformed("a malformed chunk size: " + abbreviate(sizeLine));
            }
            long size;
            try {
                size = Long.parseLong(hex, 16);
            } catch (NumberFormatException e) {
                throw new Malformed("a malformed chunk size: " + abbreviate(sizeLine), e);
            }
            if (size < 0) {
                throw new Malformed("a malformed chunk size: " + abbreviate(sizeLine));
            }
            if (size == 0) {
                for (int n = 0; !line().isEmpty(); n++) {
                    if (n >= MAX_HEADERS) {
                        throw new Malformed("an answer with more than " + MAX_HEADERS + " trailer lines");
                    }
                }
                done = true;
                return false;
            }
            remaining = size;
            return true;
        }

        byte[] readBody() throws IOException {
            if (!chunked && remaining >= 0) {
                if (remaining > Integer.MAX_VALUE - 16) {
                    throw new Malformed("an answer of " + remaining + " bytes is too large");
                }
                if (remaining <= 1 << 20) {
                    byte[] body = new byte[(int) remaining];
                    int off = 0;
                    while (off < body.length) {
                        int n = read(body, off, body.length - off);
                        if (n < 0) {
                            throw new EOFException("the server closed the connection mid-answer");
                        }
                        off += n;
                    }
                    done = true;
                    return body;
                }
            }
            ByteArrayOutputStream all = new ByteArrayOutputStream(8192);
            byte[] chunk = new byte[8192];
            for (int n; (n = read(chunk, 0, chunk.length)) >= 0;) {
                all.write(chunk, 0, n);
            }
            return all.toByteArray();
        }
    }

    /** A body read as it arrives; its connection goes back to the pool once the body is read to its end. */
    private final class BodyStream extends InputStream {
        private final Conn c;
        private boolean closed;

        BodyStream(Conn c) {
            this.c = c;
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            int n = read(one, 0, 1);
            return n < 0 ? -1 : one[0] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (closed) {
                throw new IOException("the answer's stream is closed");
            }
            java.util.Objects.checkFromIndexSize(off, len, b.length);
            try {
                return c.read(b, off, len);
            } catch (IOException | RuntimeException e) {
                closed = true;
                c.closeQuietly();
                throw e;
            }
        }

        @Override
        public void close() {
            if (closed) {
                return;
            }
            closed = true;
            if (c.done) {
                release(c);
            } else {
                c.closeQuietly();
            }
        }
    }
}
