package dev.rdq.envelope;

/**
 * Why an envelope (or a part of one) was refused. The string forms are rdq's
 * stable contract, shared with the Rust codec, the server and the compliance
 * fixtures.
 */
public enum ErrorCode {
    /** Not JSON, not an object, a duplicate key, a missing required field or a value of the wrong JSON type. */
    MALFORMED_ENVELOPE,
    /** {@code envelope_version} is greater than this SDK's (1). */
    UNSUPPORTED_ENVELOPE_VERSION,
    /** {@code queue} is empty, longer than 240 bytes or outside {@code [a-z0-9._-]}. */
    INVALID_QUEUE_NAME,
    /** {@code handler_ref} is empty, longer than 240 bytes or outside {@code [a-z0-9._-]}. */
    INVALID_HANDLER_REF,
    /** A value of the right JSON type that breaks a rule; the error names the field's path. */
    INVALID_FIELD,
    /** The canonical encoding is larger than the limit. */
    PAYLOAD_TOO_LARGE,
    /** A user-supplied header uses the {@code rdq.} prefix reserved for the system. */
    RESERVED_HEADER
}
