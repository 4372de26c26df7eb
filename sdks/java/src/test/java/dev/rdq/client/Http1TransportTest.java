package dev.rdq.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rdq.RdqException;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/** The SDK's HTTP/1.1 transport against a scripted server: framing, reuse, retry and malformed answers. */
class Http1TransportTest {

    /** What the scripted server answers: raw bytes, or null to close the connection without answering. */
    interface Script {
        byte[] answer(int connection, int request, String head, byte[] body);
    }

    /** A loopback server that reads HTTP/1.1 requests and answers them from a script. */
    static final class FakeServer implements AutoCloseable {
        final ServerSocket socket;
        final AtomicInteger connections = new AtomicInteger();
        final List<String> requests = new CopyOnWriteArrayList<>();
        final List<Socket> open = new CopyOnWriteArrayList<>();
        final Thread acceptor;

        FakeServer(Script script) throws IOException {
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            acceptor = new Thread(() -> {
                while (!socket.isClosed()) {
                    Socket s;
                    try {
                        s = socket.accept();
                    } catch (IOException e) {
                        return;
                    }
                    open.add(s);
                    int conn = connections.incrementAndGet();
                    Thread t = new Thread(() -> serve(s, conn, script));
                    t.setDaemon(true);
                    t.start();
                }
            });
            acceptor.setDaemon(true);
            acceptor.start();
        }

        private void serve(Socket s, int conn, Script script) {
            try (s) {
                InputStream in = s.getInputStream();
                OutputStream out = s.getOutputStream();
                for (int req = 1;; req++) {
                    String head = readHead(in);
                    if (head == null) {
                        return;
                    }
                    int length = 0;
                    for (String line : head.split("\r\n")) {
                        if (line.toLowerCase().startsWith("content-length:")) {
                            length = Integer.parseInt(line.substring(15).trim());
                        }
                    }
                    byte[] body = in.readNBytes(length);
                    requests.add(head.split("\r\n")[0]);
                    byte[] answer = script.answer(conn, req, head, body);
                    if (answer == null) {
                        return;
                    }
                    out.write(answer);
                    out.flush();
                }
            } catch (IOException e) {
                // The client went away.
            }
        }

        private static String readHead(InputStream in) throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            int matched = 0;
            while (matched < 4) {
                int c = in.read();
                if (c < 0) {
                    return null;
                }
                b.write(c);
                matched = (c == '\r' && (matched == 0 || matched == 2)) || (c == '\n' && (matched == 1 || matched == 3))
                        ? matched + 1 : 0;
            }
            return b.toString(StandardCharsets.ISO_8859_1);
        }

        URI url() {
            return URI.create("http://127.0.0.1:" + socket.getLocalPort());
        }

        @Override
        public void close() throws IOException {
            socket.close();
            for (Socket s : open) {
                s.close();
            }
        }
    }

    private static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.ISO_8859_1);
    }

    private static byte[] ok(String body) {
        return ascii("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: " + body.length() + "\r\n\r\n" + body);
    }

    private static Http1Transport transport(FakeServer s, Duration idle) {
        return new Http1Transport(s.url(), "Bearer t0k3n", Duration.ofSeconds(2), idle, null);
    }

    private static Transport.Call get(String target) {
        return new Transport.Call("GET", target, null, null, Duration.ofSeconds(5));
    }

    private static String text(Transport.Reply r) {
        return new String(r.body(), StandardCharsets.UTF_8);
    }

    @Test
    @DisplayName("a kept-alive connection carries request after request, with the request line, host and token as sent")
    void reuses_one_connection() throws Exception {
        List<String> heads = new CopyOnWriteArrayList<>();
        try (FakeServer s = new FakeServer((c, r, head, body) -> {
            heads.add(head);
            return ok("{\"n\":" + r + ",\"len\":" + body.length + "}");
        }); Http1Transport t = transport(s, Duration.ofSeconds(60))) {
            for (int i = 1; i <= 5; i++) {
                byte[] body = ("{\"i\":" + i + "}").getBytes(StandardCharsets.UTF_8);
                Transport.Reply r = t.send(new Transport.Call("POST", "/v1/tasks", body, null, Duration.ofSeconds(5)));
                assertEquals(200, r.status());
                assertEquals("{\"n\":" + i + ",\"len\":" + body.length + "}", text(r));
            }
            assertEquals(1, s.connections.get());
            String head = heads.get(0);
            assertTrue(head.startsWith("POST /v1/tasks HTTP/1.1\r\n"), head);
            assertTrue(head.contains("\r\nhost: 127.0.0.1:" + s.socket.getLocalPort() + "\r\n"), head);
            assertTrue(head.contains("\r\nauthorization: Bearer t0k3n\r\n"), head);
            assertTrue(head.contains("\r\ncontent-type: application/json\r\n"), head);
        }
    }

    @Test
    @DisplayName("a chunked answer, with chunk extensions and trailers, is read whole and the connection kept")
    void chunked_answers() throws Exception {
        try (FakeServer s = new FakeServer((c, r, head, body) -> ascii("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                + "4;ext=1\r\n{\"a\"\r\n" + "5\r\n:\"xyz\r\n" + "2\r\n\"}\r\n" + "0\r\nx-trailer: 1\r\n\r\n"));
             Http1Transport t = transport(s, Duration.ofSeconds(60))) {
            assertEquals("{\"a\":\"xyz\"}", text(t.send(get("/one"))));
            assertEquals("{\"a\":\"xyz\"}", text(t.send(get("/two"))));
            assertEquals(1, s.connections.get());
        }
    }

    @Test
    @DisplayName("an answer that says connection: close, or has no length, ends its connection; the next call opens another")
    void closing_answers() throws Exception {
        try (FakeServer s = new FakeServer((c, r, head, body) -> c == 1
                ? ascii("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}")
                : null);
             Http1Transport t = transport(s, Duration.ofSeconds(60))) {
            assertEquals("{}", text(t.send(get("/a"))));
            // Connection 2 closes without answering: a fresh connection is not retried.
            assertThrows(IOException.class, () -> t.send(get("/b")));
            assertEquals(2, s.connections.get());
            assertEquals(2, s.requests.size());
        }
        try (FakeServer s = new FakeServer((c, r, head, body) -> c == 1 ? ascii("HTTP/1.1 200 OK\r\n\r\n{\"until\":\"close\"}") : ok("{}"));
             Http1Transport t = transport(s, Duration.ofSeconds(60))) {
            // The fake server keeps the connection open after such an answer, so close it from the script's side:
            // an answer without length is read to the end of the stream.
            Thread closer = new Thread(() -> {
                try {
                    Thread.sleep(200);
                    for (Socket o : s.open) {
                        o.shutdownOutput();
                    }
                } catch (InterruptedException | IOException e) {
                    // Test ends either way.
                }
            });
            closer.start();
            assertEquals("{\"until\":\"close\"}", text(t.send(get("/c"))));
            closer.join();
            t.send(get("/d")).status();
            assertEquals(2, s.connections.get());
        }
    }

    @Test
    @DisplayName("a pooled connection the server closed while idle is replaced, and the request is sent once")
    void stale_connection_is_replaced() throws Exception {
        try (FakeServer s = new FakeServer((c, r, head, body) -> r == 1 ? ok("{\"c\":" + c + "}") : null);
             Http1Transport t = transport(s, Duration.ofSeconds(60))) {
            assertEquals("{\"c\":1}", text(t.send(get("/first"))));
            // The server reads the second request on connection 1 and closes it unanswered, as an idle
            // timeout would; the transport resends it once on a new connection.
            assertEquals("{\"c\":2}", text(t.send(get("/second"))));
            assertEquals(2, s.connections.get());
        }
    }

    @Test
    @DisplayName("a connection idle longer than the idle timeout is not reused")
    void idle_timeout() throws Exception {
        try (FakeServer s = new FakeServer((c, r, head, body) -> ok("{}"));
             Http1Transport t = transport(s, Duration.ofMillis(100))) {
            t.send(get("/a"));
            Thread.sleep(250);
            t.send(get("/b"));
            assertEquals(2, s.connections.get());
        }
    }

    @Test
    @DisplayName("interim 1xx answers are skipped and a body over 1 MiB arrives whole")
    void interim_and_large_answers() throws Exception {
        byte[] big = new byte[3 * 1024 * 1024 + 7];
        for (int i = 0; i < big.length; i++) {
            big[i] = (byte) ('a' + i % 26);
        }
        try (FakeServer s = new FakeServer((c, r, head, body) -> {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            b.writeBytes(ascii("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: " + big.length + "\r\n\r\n"));
            b.writeBytes(big);
            return b.toByteArray();
        }); Http1Transport t = transport(s, Duration.ofSeconds(60))) {
            Transport.Reply r = t.send(get("/big"));
            assertEquals(200, r.status());
            assertArrayEquals(big, r.body());
            try (InputStream in = t.open(get("/big")).body()) {
                assertArrayEquals(big, in.readAllBytes());
            }
            assertEquals(1, s.connections.get());
        }
    }

    @Test
    @DisplayName("a malformed answer is UNEXPECTED_RESPONSE through the client, and its connection is dropped")
    void malformed_answers() throws Exception {
        String[] bad = {
            "HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n",
            "SPDY/3 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
            "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
        };
        for (String answer : bad) {
            try (FakeServer s = new FakeServer((c, r, head, body) -> ascii(answer))) {
                RdqClient client = RdqClient.builder(s.url()).requestTimeout(Duration.ofSeconds(2)).build();
                RdqException e = assertThrows(RdqException.class, () -> client.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0"), answer);
                assertEquals(RdqException.UNEXPECTED_RESPONSE, e.code(), answer + " -> " + e.getMessage());
                assertInstanceOf(Http1Transport.Malformed.class, e.getCause(), answer);
            }
        }
    }

    @Test
    @DisplayName("a request target or token with spaces or controls is refused before anything is sent")
    void refuses_unsendable_requests() throws Exception {
        try (FakeServer s = new FakeServer((c, r, head, body) -> ok("{}"));
             Http1Transport t = transport(s, Duration.ofSeconds(60))) {
            assertThrows(IllegalArgumentException.class, () -> t.send(get("/a b")));
            assertThrows(IllegalArgumentException.class, () -> t.send(get("/a\r\nx: y")));
            assertEquals(0, s.requests.size());
        }
        assertThrows(IllegalArgumentException.class, () -> RdqClient.builder("http://127.0.0.1:1").token("a\r\nb"));
        assertThrows(IllegalArgumentException.class, () -> RdqClient.builder("ftp://127.0.0.1:1").build());
    }

    @Test
    @DisplayName("a call whose thread is interrupted while it waits ends INTERRUPTED, with the interrupt kept")
    void interrupted_while_waiting() throws Exception {
        try (FakeServer s = new FakeServer((c, r, head, body) -> {
            try {
                Thread.sleep(5_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return null;
        })) {
            RdqClient client = RdqClient.builder(s.url()).requestTimeout(Duration.ofMillis(800)).build();
            java.util.concurrent.atomic.AtomicReference<Object> outcome = new java.util.concurrent.atomic.AtomicReference<>();
            Thread caller = new Thread(() -> {
                try {
                    client.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0");
                    outcome.set("answered");
                } catch (RdqException e) {
                    outcome.set(e.code() + (Thread.currentThread().isInterrupted() ? " interrupted" : ""));
                }
            });
            caller.start();
            Thread.sleep(150);
            caller.interrupt();
            caller.join(5_000);
            assertEquals(RdqException.INTERRUPTED + " interrupted", outcome.get());
        }
    }
}
