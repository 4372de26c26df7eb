package dev.rdq.worker;

/**
 * Turns a task's payload bytes into what its handler takes. Anything it
 * throws makes the task a permanent failure of type {@link
 * PayloadDecodeException}: a payload that cannot be read will not become
 * readable by retrying it.
 */
@FunctionalInterface
public interface PayloadDecoder<T> {
    /** The handler's argument for {@code payload}. */
    T decode(byte[] payload) throws Exception;
}
