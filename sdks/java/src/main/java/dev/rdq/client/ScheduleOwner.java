package dev.rdq.client;

import java.util.Locale;
import java.util.Optional;

/**
 * Who put a schedule ({@code docs/schedules.md}): {@link #API} for HTTP,
 * gRPC and the CLI, {@link #CODE} for a program declaring its schedules at
 * its start (a worker's {@code schedule(…)}). The owner tells a program which
 * stored schedules its code no longer declares.
 */
public enum ScheduleOwner {
    /** Put over the API (HTTP, gRPC, the CLI): the default. */
    API,
    /** Declared in code, put by a program at its start. */
    CODE;

    /** The owner's JSON name ({@code api}, {@code code}), as {@code ?owner=} takes it. */
    public String wire() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The owner of a JSON name; empty for one this SDK does not know. */
    public static Optional<ScheduleOwner> fromWire(String s) {
        for (ScheduleOwner o : values()) {
            if (o.wire().equals(s)) {
                return Optional.of(o);
            }
        }
        return Optional.empty();
    }
}
