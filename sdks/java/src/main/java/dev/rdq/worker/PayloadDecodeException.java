package dev.rdq.worker;

/**
 * Why a task's payload did not decode into its handler's type: recorded as
 * the error type {@code dev.rdq.worker.PayloadDecodeException} of a permanent
 * failure, with the decoder's exception as its cause (message and stack).
 */
public final class PayloadDecodeException extends Exception {
    private static final long serialVersionUID = 1L;

    PayloadDecodeException(String target, Throwable cause) {
        super("the payload does not decode into " + target + ": " + cause, cause);
    }
}
