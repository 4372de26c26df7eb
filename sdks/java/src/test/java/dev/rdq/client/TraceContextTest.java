package dev.rdq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Optional;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class TraceContextTest {
    static final String TP1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    static final String TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

    @Test
    @DisplayName("parse accepts what rdq serve accepts (blanks trimmed, later versions) and refuses every malformed shape")
    void validation() {
        assertTrue(TraceContext.isValid(TP1));
        assertTrue(TraceContext.isValid(TP2));
        assertEquals(Optional.of(TP1), TraceContext.parse(" \t" + TP1 + "  "));
        String v1 = "01" + TP1.substring(2);
        assertEquals(Optional.of(v1), TraceContext.parse(v1), "a later version");
        assertEquals(Optional.of(v1 + "-more-fields"), TraceContext.parse(v1 + "-more-fields"), "a later version's extra fields");
        String[] bad = {
            null,
            "",
            "garbage",
            TP1.toUpperCase(java.util.Locale.ROOT),                                  // upper-case hex
            "ff" + TP1.substring(2),                                                // the forbidden version
            "0g" + TP1.substring(2),                                                // version not hex
            "01" + TP1.substring(2) + "x",                                          // no '-' before more fields
            "01" + TP1.substring(2) + "-a b",                                       // not a header value
            "01" + TP1.substring(2) + "-a\r\nx: y",
            TP1 + "\n",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",              // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",              // zero parent id
            TP1 + "-extra",                                                         // version 00 has four fields
            TP1.substring(0, 54),                                                   // too short
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",              // separator
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",              // not hex
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0z",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",             // leading space
        };
        for (String b : bad) {
            assertFalse(TraceContext.isValid(b), "accepted " + b);
        }
    }

    @Test
    @DisplayName("scopes nest and restore; a malformed value opens a scope with no context")
    void scopes_nest_and_restore() {
        assertEquals(Optional.empty(), TraceContext.current());
        TraceContext.Scope outer = TraceContext.open(TP1);
        try {
            assertEquals(Optional.of(TP1), TraceContext.current());
            TraceContext.Scope inner = TraceContext.open(TP2);
            assertEquals(Optional.of(TP2), TraceContext.current());
            inner.close();
            assertEquals(Optional.of(TP1), TraceContext.current());
            inner.close(); // a second close changes nothing
            assertEquals(Optional.of(TP1), TraceContext.current());
            TraceContext.Scope bad = TraceContext.open("00-nonsense");
            assertEquals(Optional.empty(), TraceContext.current());
            bad.close();
            assertEquals(Optional.of(TP1), TraceContext.current());
            TraceContext.Scope none = TraceContext.open(null);
            assertEquals(Optional.empty(), TraceContext.current());
            none.close();
            assertEquals(Optional.of(TP1), TraceContext.current());
        } finally {
            outer.close();
        }
        assertEquals(Optional.empty(), TraceContext.current());
    }

    @Test
    @DisplayName("run and call restore the previous context, also when the body throws")
    void run_and_call_restore() {
        assertEquals(TP2, TraceContext.call(TP2, () -> TraceContext.current().orElseThrow()));
        assertThrows(IllegalStateException.class, () -> TraceContext.run(TP1, () -> {
            assertEquals(Optional.of(TP1), TraceContext.current());
            throw new IllegalStateException("boom");
        }));
        assertEquals(Optional.empty(), TraceContext.current());
        TraceContext.run(TP1, () -> {
            TraceContext.run(TP2, () -> assertEquals(Optional.of(TP2), TraceContext.current()));
            assertEquals(Optional.of(TP1), TraceContext.current());
        });
        assertEquals(Optional.empty(), TraceContext.current());
    }

    @Test
    @DisplayName("the context belongs to its thread")
    void per_thread() throws InterruptedException {
        AtomicReference<Optional<String>> seen = new AtomicReference<>();
        TraceContext.Scope scope = TraceContext.open(TP1);
        try {
            assertEquals(Optional.of(TP1), TraceContext.current());
            Thread t = new Thread(() -> seen.set(TraceContext.current()));
            t.start();
            t.join();
        } finally {
            scope.close();
        }
        assertEquals(Optional.empty(), seen.get());
    }
}
