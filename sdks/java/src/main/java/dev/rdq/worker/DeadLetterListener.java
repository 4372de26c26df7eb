package dev.rdq.worker;

import dev.rdq.envelope.Envelope;

/** Told about every task that a settle of this worker sent to the DLQ (status DEAD). */
@FunctionalInterface
public interface DeadLetterListener {
    /** Called on a settler thread with the dead envelope, its full history included. */
    void onDeadLetter(Envelope task);
}
