package dev.rdq.support;

import dev.rdq.client.RdqClient;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.stream.Stream;

/**
 * A real {@code rdq serve} for a test: a free loopback port, a fresh store
 * (an embedded store in a temporary directory, an in-memory store, or a
 * PostgreSQL schema of its own that is dropped on close).
 */
public final class RdqServer implements AutoCloseable {
    /** The PostgreSQL the end-to-end tests also run on. */
    public static final String POSTGRES = "postgres://postgres@127.0.0.1:5432/test";

    private final Process process;
    private final Path dir;
    private final String schema;
    private final URI url;
    private final javax.net.ssl.SSLContext trust;

    private RdqServer(Process process, Path dir, String schema, URI url, javax.net.ssl.SSLContext trust) {
        this.process = process;
        this.dir = dir;
        this.schema = schema;
        this.url = url;
        this.trust = trust;
    }

    /** A server on a fresh in-memory store. */
    public static RdqServer memory() {
        return start(Store.MEMORY, null);
    }

    /** A server on a fresh embedded store. */
    public static RdqServer embedded() {
        return start(Store.EMBEDDED, null);
    }

    /** A server on {@code store}, with an optional TOML configuration. */
    public static RdqServer start(Store store, String configToml) {
        return start(store, configToml, null, null);
    }

    /**
     * A server on {@code store}; with a {@code trust} context, its
     * configuration has a {@code [tls]} section and {@link #url()} is {@code
     * https://host:port}.
     */
    public static RdqServer start(Store store, String configToml, String host, javax.net.ssl.SSLContext trust) {
        try {
            Path dir = Files.createTempDirectory("rdq-java-test");
            String schema = null;
            String storeArg;
            if (store == Store.POSTGRES) {
                schema = "rdq_java_" + Long.toHexString(System.nanoTime()).toLowerCase(Locale.ROOT);
                storeArg = POSTGRES + "?schema=" + schema;
            } else if (store == Store.MEMORY) {
                storeArg = "memory:";
            } else {
                storeArg = dir.resolve("data").toString();
            }
            int port = freePort();
            List<String> cmd = new ArrayList<>(List.of(Repo.rdqBinary().toString(), "serve", "--listen",
                    "127.0.0.1:" + port, "--store", storeArg, "--log", "warn"));
            if (configToml != null) {
                Path cfg = dir.resolve("rdq.toml");
                Files.writeString(cfg, configToml);
                cmd.add("--config");
                cmd.add(cfg.toString());
            }
            Process p = new ProcessBuilder(cmd)
                    .redirectErrorStream(true)
                    .redirectOutput(dir.resolve("server.log").toFile())
                    .start();
            URI url = URI.create((trust == null ? "http://127.0.0.1:" : "https://" + host + ":") + port);
            RdqServer s = new RdqServer(p, dir, schema, url, trust);
            s.awaitReady();
            return s;
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private void awaitReady() {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(1)).build();
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException("rdq serve exited: " + log());
            }
            if (trust != null) {
                // HTTPS: rdq serve opens its store before it listens, so accepting is ready.
                try {
                    new java.net.Socket("127.0.0.1", url.getPort()).close();
                    return;
                } catch (IOException e) {
                    sleep(50);
                    continue;
                }
            }
            try {
                HttpResponse<Void> r = http.send(HttpRequest.newBuilder(url.resolve("/readyz")).build(),
                        HttpResponse.BodyHandlers.discarding());
                if (r.statusCode() == 200) {
                    return;
                }
            } catch (IOException e) {
                // Not listening yet.
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
            sleep(50);
        }
        throw new IllegalStateException("rdq serve did not become ready: " + log());
    }

    public URI url() {
        return url;
    }

    /** The PostgreSQL schema of a {@link Store#POSTGRES} server (dropped on close); null otherwise. */
    public String schema() {
        return schema;
    }

    /** A client of this server. */
    public RdqClient client() {
        return RdqClient.builder(url).build();
    }

    /** What the server logged. */
    public String log() {
        try {
            return Files.readString(dir.resolve("server.log"));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(10, java.util.concurrent.TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (schema != null) {
            try {
                Process drop = new ProcessBuilder("psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "test",
                        "-c", "DROP SCHEMA IF EXISTS " + schema + " CASCADE").redirectErrorStream(true).start();
                drop.getInputStream().readAllBytes();
                drop.waitFor();
            } catch (IOException e) {
                // Best effort: a leftover schema is named rdq_java_*.
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        try (Stream<Path> walk = Files.walk(dir)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // Temporary files only.
        }
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Where the server keeps its tasks. */
    public enum Store {
        EMBEDDED,
        POSTGRES,
        /** The in-memory store (the only one with capability {@code unique} so far). */
        MEMORY
    }
}
