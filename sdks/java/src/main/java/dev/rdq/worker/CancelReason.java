package dev.rdq.worker;

/**
 * Why the worker cancelled a running handler: it set {@link
 * TaskContext#isCancelled()} and interrupted the handler's thread. A handler
 * that checks the flag or honours interrupts stops early; one that does not
 * runs on, and what it returns afterwards is decided as below.
 */
public enum CancelReason {
    /** The handler ran past its timeout: the call is a failure of type {@link HandlerTimeoutException}. */
    TIMEOUT,
    /** The lease is gone (refused extension, or it ran out unreachable): nothing is settled. */
    LEASE_LOST,
    /** The worker is shutting down past its grace: the task is released (due now, no attempt spent). */
    SHUTDOWN,
    /**
     * A cancel was asked of the task ({@code RdqClient.cancel}, {@code rdq task
     * cancel}, the dashboard; {@link TaskContext#cancelRequest()} says who and
     * why): a success the handler still returns counts; a failure is reported
     * as type {@code rdq.Cancelled}, and the task ends DEAD with reason
     * {@code CANCELLED}.
     */
    CANCEL_REQUESTED
}
