package dev.rdq.client;

/** What a worker reports for a claimed task ({@code POST /v1/settle}). */
public enum SettleOutcome {
    /** The task succeeded. */
    SUCCESS,
    /** Retry with backoff until {@code max_attempts} (needs an error). */
    RETRYABLE_FAILURE,
    /** Dead-letter now (needs an error). */
    PERMANENT_FAILURE,
    /** Unclassified: the queue's {@code non_retryable_errors} globs decide, default retryable (needs an error). */
    FAILURE,
    /** Put back for {@code defer_ms}, no attempt spent. */
    DEFER,
    /** Hand back unrun (a worker shutting down): due now, no attempt spent. */
    RELEASE
}
