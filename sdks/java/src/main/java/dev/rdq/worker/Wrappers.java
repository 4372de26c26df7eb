package dev.rdq.worker;

import dev.rdq.envelope.ErrorInfo;

/** What the per-call wrappers record. */
final class Wrappers {
    private Wrappers() {}

    static ErrorInfo errorInfo(Exception wrapper, String errorType) {
        Throwable cause = wrapper.getCause();
        if (errorType != null) {
            ErrorInfo e = ErrorInfo.of(errorType, wrapper.getMessage());
            return cause == null ? e : e.withStack(Outcome.errorOf(cause).stack().orElse(null));
        }
        if (cause != null) {
            return Outcome.errorOf(cause);
        }
        return Outcome.errorOf(wrapper);
    }
}
