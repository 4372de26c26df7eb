package dev.rdq.worker;

import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * The Java outcome ladder ({@code docs/outcomes.md}): how one call's return
 * value or exception becomes an {@link Outcome}. First match wins:
 *
 * <ol>
 *   <li>the queue's {@link OutcomeMapper}, when registered, is authoritative
 *       (a {@code null} answer falls through);</li>
 *   <li>per-call wrappers: a returned {@link Outcome}, or a thrown
 *       {@link PermanentException}, {@link RetryableException} or
 *       {@link DeferException} (or its subclass {@link ThrottleException},
 *       a deferral that also throttles) — the first found walking the cause
 *       chain from the thrown exception down;</li>
 *   <li>the worker's exception lists, matched with {@code instanceof} (so
 *       subclasses match) against the thrown exception and every cause in its
 *       {@code getCause()} chain; a non-retryable match anywhere in the chain
 *       wins over a retryable one;</li>
 *   <li>the queue's {@code non_retryable_errors} / {@code retryable_errors}
 *       globs on the error type, applied by the server (outcome {@code FAILURE});</li>
 *   <li>otherwise retryable (also applied by the server).</li>
 * </ol>
 *
 * <p>A normal return (any value, {@code void}, {@code null}) is SUCCESS
 * unless rung 1 or 2 says otherwise. An {@link Error} such as
 * {@code StackOverflowError} is a failure like any other throwable: retryable
 * unless a rung above says otherwise. The recorded {@code error_type} is the
 * thrown exception's {@code getClass().getName()} (for a wrapper, its cause's).
 */
public final class OutcomeLadder {
    private final OutcomeMapper<Object> mapper;
    private final List<Class<? extends Throwable>> retryable;
    private final List<Class<? extends Throwable>> nonRetryable;

    public OutcomeLadder(OutcomeMapper<Object> mapper, List<Class<? extends Throwable>> retryable,
            List<Class<? extends Throwable>> nonRetryable) {
        this.mapper = mapper;
        this.retryable = List.copyOf(retryable);
        this.nonRetryable = List.copyOf(nonRetryable);
    }

    /** The outcome of a call that returned {@code returnValue} or threw {@code error}. */
    public Outcome decide(Object returnValue, Throwable error) {
        return decide(null, returnValue, error);
    }

    /**
     * The outcome of a call whose handler has its own {@code handlerMapper}
     * (null: this ladder's mapper, if any, is rung 1).
     */
    public <R> Outcome decide(OutcomeMapper<? super R> handlerMapper, R returnValue, Throwable error) {
        Outcome mapped = handlerMapper != null ? map(handlerMapper, returnValue, error)
                : mapper != null ? map(mapper, returnValue, error) : null;
        if (mapped != null) {
            return mapped;
        }
        return belowMapper(returnValue, error);
    }

    private static <R> Outcome map(OutcomeMapper<? super R> m, R returnValue, Throwable error) {
        try {
            return m.map(returnValue, error);
        } catch (RuntimeException | Error e) {
            return Outcome.retryable(e);
        }
    }

    private Outcome belowMapper(Object returnValue, Throwable error) {
        if (error == null) {
            return returnValue instanceof Outcome o ? o : Outcome.success();
        }
        for (Throwable t : chain(error)) {
            if (t instanceof PermanentException p) {
                return Outcome.permanent(p.errorInfo());
            }
            if (t instanceof RetryableException r) {
                return Outcome.retryable(r.errorInfo());
            }
            if (t instanceof DeferException d) {
                return Outcome.throttled(d.delay(), d.throttle().orElse(null));
            }
        }
        List<Throwable> chain = chain(error);
        if (matches(chain, nonRetryable)) {
            return Outcome.permanent(error);
        }
        if (matches(chain, retryable)) {
            return Outcome.retryable(error);
        }
        return Outcome.unclassified(error);
    }

    private static boolean matches(List<Throwable> chain, List<Class<? extends Throwable>> classes) {
        for (Throwable t : chain) {
            for (Class<? extends Throwable> c : classes) {
                if (c.isInstance(t)) {
                    return true;
                }
            }
        }
        return false;
    }

    /** The exception and its causes, each once (a cyclic chain stops at the repeat). */
    static List<Throwable> chain(Throwable error) {
        Map<Throwable, Boolean> seen = new IdentityHashMap<>();
        List<Throwable> out = new java.util.ArrayList<>();
        for (Throwable t = error; t != null && seen.put(t, Boolean.TRUE) == null; t = t.getCause()) {
            out.add(t);
        }
        return out;
    }
}
