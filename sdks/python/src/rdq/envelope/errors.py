"""Why an envelope, or a part of one, was refused: a stable code and a path."""

from __future__ import annotations

from enum import StrEnum


class Code(StrEnum):
    """The envelope's stable error codes, shared with the Rust codec, the
    HTTP API's problem documents and the compliance fixtures."""

    MALFORMED_ENVELOPE = "MALFORMED_ENVELOPE"
    """Not JSON, not an object, a duplicate key, a missing required field or
    a value of the wrong JSON type."""
    UNSUPPORTED_ENVELOPE_VERSION = "UNSUPPORTED_ENVELOPE_VERSION"
    """`envelope_version` is newer than 1."""
    INVALID_QUEUE_NAME = "INVALID_QUEUE_NAME"
    """`queue` is not 1-240 bytes of `[a-z0-9._-]`."""
    INVALID_HANDLER_REF = "INVALID_HANDLER_REF"
    """`handler_ref` is not 1-240 bytes of `[a-z0-9._-]`."""
    INVALID_FIELD = "INVALID_FIELD"
    """A value of the right JSON type that breaks a rule."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    """The canonical encoding is longer than the limit."""
    RESERVED_HEADER = "RESERVED_HEADER"
    """A user header uses the reserved `rdq.` prefix."""


class EnvelopeError(ValueError):
    """An envelope was refused. `code` is stable; `path` names the field
    (`attempts[0].error.type`), or is empty when the error is about none."""

    def __init__(self, code: Code, path: str, message: str) -> None:
        self.code = code
        self.path = path
        self.message = message
        super().__init__(f"{code.value}: {path}: {message}" if path else f"{code.value}: {message}")


def malformed(path: str, message: str) -> EnvelopeError:
    return EnvelopeError(Code.MALFORMED_ENVELOPE, path, message)


def invalid(path: str, message: str) -> EnvelopeError:
    return EnvelopeError(Code.INVALID_FIELD, path, message)
