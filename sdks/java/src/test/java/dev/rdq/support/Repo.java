package dev.rdq.support;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;

/** Where the rdq repository, its fixtures and the rdq binary are, for tests. */
public final class Repo {
    private static Path binary;

    private Repo() {}

    /** The repository root: the nearest parent of the working directory holding {@code compliance/fixtures}. */
    public static Path root() {
        Path p = Path.of("").toAbsolutePath();
        while (p != null) {
            if (Files.isDirectory(p.resolve("compliance/fixtures")) && Files.exists(p.resolve("Cargo.toml"))) {
                return p;
            }
            p = p.getParent();
        }
        throw new IllegalStateException("no rdq repository above " + Path.of("").toAbsolutePath());
    }

    public static Path fixtures() {
        String env = System.getenv("RDQ_FIXTURES");
        return env != null ? Path.of(env) : root().resolve("compliance/fixtures");
    }

    /**
     * The rdq binary: {@code RDQ_BIN}, else {@code cargo build --workspace --bin rdq}
     * in the repository and {@code target/debug/rdq}.
     */
    public static synchronized Path rdqBinary() {
        if (binary != null) {
            return binary;
        }
        String env = System.getenv("RDQ_BIN");
        if (env != null && !env.isEmpty()) {
            binary = Path.of(env);
            return binary;
        }
        try {
            Process p = new ProcessBuilder("cargo", "build", "--quiet", "--workspace", "--bin", "rdq")
                    .directory(root().toFile())
                    .inheritIO()
                    .start();
            if (p.waitFor() != 0) {
                throw new IllegalStateException("cargo build --workspace --bin rdq failed");
            }
        } catch (IOException e) {
            throw new IllegalStateException("cannot run cargo (set RDQ_BIN to an rdq binary)", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
        binary = root().resolve("target/debug/rdq");
        return binary;
    }

    /** The rdq binary if one is configured or already built, without building. */
    public static Optional<Path> existingBinary() {
        String env = System.getenv("RDQ_BIN");
        if (env != null && !env.isEmpty()) {
            return Optional.of(Path.of(env));
        }
        if (binary != null) {
            return Optional.of(binary);
        }
        Path p = root().resolve("target/debug/rdq");
        return Files.isExecutable(p) ? Optional.of(p) : Optional.empty();
    }
}
