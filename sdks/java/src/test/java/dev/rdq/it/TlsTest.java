package dev.rdq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.support.RdqServer;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.junit.jupiter.api.DisplayName;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The SDK's own transport over HTTPS against a real {@code rdq serve} with a certificate made for the test. */
class TlsTest {
    @TempDir
    Path dir;

    /** A self-signed certificate for {@code san} (openssl), its key, and a TLS context trusting it. */
    private record Cert(Path cert, Path key, SSLContext trust) {}

    private Cert cert(String name, String san) throws Exception {
        Path cert = dir.resolve(name + ".pem");
        Path key = dir.resolve(name + ".key");
        Process p = new ProcessBuilder("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", key.toString(), "-out", cert.toString(), "-days", "2", "-subj", "/CN=" + name,
                "-addext", "subjectAltName=" + san).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertEquals(0, p.waitFor(), out);
        KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
        ks.load(null, null);
        try (InputStream in = Files.newInputStream(cert)) {
            Certificate c = CertificateFactory.getInstance("X.509").generateCertificate(in);
            ks.setCertificateEntry(name, c);
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ks);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, tmf.getTrustManagers(), null);
        return new Cert(cert, key, ctx);
    }

    private static String tls(Cert c) {
        return "[tls]\ncert = \"" + c.cert() + "\"\nkey = \"" + c.key() + "\"\n";
    }

    @Test
    @DisplayName("HTTPS: a trusted certificate carries submits and reads, by IP and by name; an untrusted one is CONNECTION_FAILED")
    void https_with_a_trusted_certificate() throws Exception {
        Cert c = cert("localhost", "DNS:localhost,IP:127.0.0.1");
        try (RdqServer server = RdqServer.start(RdqServer.Store.EMBEDDED, tls(c), "127.0.0.1", c.trust())) {
            for (String host : new String[] {"127.0.0.1", "localhost"}) {
                RdqClient client = RdqClient.builder("https://" + host + ":" + server.url().getPort()).sslContext(c.trust()).build();
                Envelope env = client.submit(SubmitRequest.builder("tls.q", "h").payloadJson("{\"over\":\"tls\"}").build());
                assertEquals(env.id(), client.get(env.id()).id());
                assertEquals(env.id(), client.get(env.id()).id());
                client.close();
            }
            // The JDK's default trust store does not know the test's certificate.
            RdqClient untrusting = RdqClient.builder(server.url()).build();
            assertEquals(RdqException.CONNECTION_FAILED, assertThrows(RdqException.class,
                    () -> untrusting.submit(SubmitRequest.builder("tls.q", "h").build())).code());
            // Plain HTTP to the HTTPS port gets no HTTP answer.
            RdqClient plain = RdqClient.builder("http://127.0.0.1:" + server.url().getPort())
                    .requestTimeout(java.time.Duration.ofSeconds(3)).build();
            assertThrows(RdqException.class, () -> plain.get(env0()));
        }
    }

    @Test
    @DisplayName("HTTPS: a trusted certificate for another name fails hostname verification (CONNECTION_FAILED)")
    void https_checks_the_hostname() throws Exception {
        Cert c = cert("elsewhere", "DNS:elsewhere.example");
        try (RdqServer server = startUnprobed(c)) {
            RdqClient client = RdqClient.builder("https://127.0.0.1:" + server.url().getPort()).sslContext(c.trust()).build();
            RdqException e = assertThrows(RdqException.class, () -> client.get(env0()));
            assertEquals(RdqException.CONNECTION_FAILED, e.code(), e.getMessage());
        }
    }

    /** A server whose URL names the certificate's host (the client above dials 127.0.0.1 instead). */
    private RdqServer startUnprobed(Cert c) throws Exception {
        return RdqServer.start(RdqServer.Store.EMBEDDED, tls(c), "elsewhere.example", c.trust());
    }

    @Test
    @DisplayName("HTTPS with a bearer token: a worker on the Work stream (ALPN h2 on the same address) runs a task")
    void grpc_worker_over_tls_with_a_token() throws Exception {
        Cert c = cert("localhost", "DNS:localhost,IP:127.0.0.1");
        String tokens = "[[tokens]]\nname = \"tls-worker\"\ntoken = \"a-long-tls-secret-0123456789\"\n"
                + "scopes = [\"submit\", \"work\"]\n";
        try (RdqServer server = RdqServer.start(RdqServer.Store.EMBEDDED, tls(c) + tokens, "localhost", c.trust())) {
            RdqClient client = RdqClient.builder(server.url()).sslContext(c.trust())
                    .token("a-long-tls-secret-0123456789").build();
            String id = client.submit(SubmitRequest.builder("tls.q", "h").payloadJson("\"hi\"").build()).id();
            java.util.concurrent.CompletableFuture<String> seen = new java.util.concurrent.CompletableFuture<>();
            try (Worker w = Worker.builder(client).transport(WorkerTransport.AUTO)
                    .handler("tls.q", "h", String.class, seen::complete).start()) {
                assertEquals(WorkerTransport.GRPC, w.transport(), "gRPC answers on the HTTPS address");
                assertEquals("\"hi\"", seen.get(60, java.util.concurrent.TimeUnit.SECONDS));
                Support.awaitTask(client, id, "succeeded", e -> e.status() == dev.rdq.envelope.Status.SUCCEEDED);
            }
        }
    }

    private static String env0() {
        return "01J2ZK7Q8XW5H3N9G4T6B8RDQ0";
    }
}
