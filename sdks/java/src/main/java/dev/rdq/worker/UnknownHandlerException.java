package dev.rdq.worker;

/**
 * A task whose {@code handler_ref} has no handler in this worker: recorded
 * as a permanent failure (redrive it once a worker that knows the handler runs).
 */
public final class UnknownHandlerException extends Exception {
    private static final long serialVersionUID = 1L;

    UnknownHandlerException(String queue, String handlerRef) {
        super("no handler for " + handlerRef + " on queue " + queue);
    }
}
