package dev.rdq.support;

import java.time.Duration;
import java.util.function.Supplier;

/** Polls a condition until it holds (no timing assertions: only a generous upper bound). */
public final class Await {
    private Await() {}

    public static <T> T until(String what, Duration max, Supplier<T> probe) {
        long deadline = System.nanoTime() + max.toNanos();
        while (true) {
            T v = probe.get();
            if (v != null && !Boolean.FALSE.equals(v)) {
                return v;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out waiting for " + what);
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError(e);
            }
        }
    }

    public static void until(String what, Supplier<Boolean> probe) {
        until(what, Duration.ofSeconds(30), probe);
    }
}
