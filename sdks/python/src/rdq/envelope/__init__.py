"""The rdq v1 envelope: model, validation and the canonical codec.

`decode(b)` and `encode(env)` implement docs/envelope.md and agree byte
for byte with the Rust codec on every case of compliance/fixtures.
"""

from ._json import Json, JsonNumber
from .codec import DEFAULT_MAX_BYTES, check_size, decode, encode
from .errors import Code, EnvelopeError
from .model import VERSION, Attempt, CancelRequest, DeadReason, DeadReasonCode, Envelope, ErrorInfo, Outcome, Status
from .rules import (
    check_handler_ref,
    check_queue_name,
    check_user_headers,
    format_timestamp,
    is_reserved_header,
    is_valid_dead_reason_code,
    is_valid_flow_key,
    is_valid_name,
    parse_timestamp,
    truncate_message,
    truncate_stack,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "VERSION",
    "Attempt",
    "CancelRequest",
    "Code",
    "DeadReason",
    "DeadReasonCode",
    "Envelope",
    "EnvelopeError",
    "ErrorInfo",
    "Json",
    "JsonNumber",
    "Outcome",
    "Status",
    "check_handler_ref",
    "check_queue_name",
    "check_size",
    "check_user_headers",
    "decode",
    "encode",
    "format_timestamp",
    "is_reserved_header",
    "is_valid_dead_reason_code",
    "is_valid_flow_key",
    "is_valid_name",
    "parse_timestamp",
    "truncate_message",
    "truncate_stack",
]
