package dev.rdq.envelope;

import dev.rdq.RdqException;

/** An envelope refused by the codec or by a submit-side check, with its stable {@link ErrorCode}. */
public final class EnvelopeException extends RdqException {
    private static final long serialVersionUID = 1L;

    private final ErrorCode errorCode;

    public EnvelopeException(ErrorCode code, String path, String message) {
        super(code.name(), path, message);
        this.errorCode = code;
    }

    /** The code as an enum. */
    public ErrorCode errorCode() {
        return errorCode;
    }
}
