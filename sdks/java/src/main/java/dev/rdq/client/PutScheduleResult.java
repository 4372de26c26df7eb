package dev.rdq.client;

import java.util.Objects;

/**
 * What a put of a schedule did.
 *
 * @param created true when the name was new ({@code 201}), false when the put replaced a stored
 *     definition ({@code 200}), whose cursor, counters and creation time stay
 * @param state the schedule as stored, with its firing state
 */
public record PutScheduleResult(boolean created, ScheduleState state) {
    public PutScheduleResult {
        Objects.requireNonNull(state, "state");
    }
}
