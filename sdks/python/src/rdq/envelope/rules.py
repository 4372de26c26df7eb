"""The value rules of the v1 envelope: names, ids, timestamps, base64,
headers, flow keys, dead reason codes and the truncation of error text (docs/envelope.md)."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from .errors import Code, EnvelopeError

MAX_NAME_LEN = 240
RESERVED_HEADER_PREFIX = "rdq."
FLOW_KEY_HEADER = "rdq.flow_key"
MAX_MESSAGE_BYTES = 4 * 1024
MAX_STACK_BYTES = 64 * 1024
TRUNCATION_MARKER = "…[truncated]"

_NAME = re.compile(r"[a-z0-9._-]{1,240}")
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z")
_FLOW_KEY = re.compile(r"[A-Za-z0-9._:/@=+-]{1,128}")
_DEAD_REASON_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


@functools.lru_cache(maxsize=4096)
def is_valid_name(name: str) -> bool:
    # Cached: a producer checks the same few queue and handler names on
    # every submit.
    return name not in (".", "..") and _NAME.fullmatch(name) is not None


def check_name(name: str, code: Code, field: str) -> None:
    if is_valid_name(name):
        return
    if name == "":
        why = "must not be empty"
    elif name in (".", ".."):
        why = f"{name!r} is a path segment, not a name"
    elif len(name.encode()) > MAX_NAME_LEN:
        why = f"is {len(name.encode())} bytes long; the limit is {MAX_NAME_LEN}"
    else:
        why = f"{name!r} has characters outside [a-z0-9._-]"
    raise EnvelopeError(code, field, why)


def check_queue_name(name: str) -> None:
    check_name(name, Code.INVALID_QUEUE_NAME, "queue")


def check_handler_ref(name: str) -> None:
    check_name(name, Code.INVALID_HANDLER_REF, "handler_ref")


def is_valid_id(value: str) -> bool:
    return _ULID.fullmatch(value) is not None


def is_reserved_header(key: str) -> bool:
    """`rdq.` in any case is system metadata."""
    return key[:4].lower() == RESERVED_HEADER_PREFIX


def check_user_headers(headers: Mapping[str, str]) -> None:
    """Refuses, with RESERVED_HEADER, a header a user may not set."""
    for key in sorted(headers):
        if is_reserved_header(key):
            raise EnvelopeError(
                Code.RESERVED_HEADER,
                "headers." + key,
                f"header {key!r} uses the prefix 'rdq.', which is reserved for system metadata",
            )


def is_valid_flow_key(key: str) -> bool:
    return _FLOW_KEY.fullmatch(key) is not None


def is_valid_dead_reason_code(code: str) -> bool:
    """A well-formed reason code, known or not: `[A-Z][A-Z0-9_]*`, 1 to 64 bytes."""
    return _DEAD_REASON_CODE.fullmatch(code) is not None


def is_valid_timestamp(value: str) -> bool:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ`, a real date of years 0000-9999.

    Timestamps stay strings in the model: year 0000 is legal on the wire
    and `datetime` cannot hold it, and the spelling is the canonical one."""
    m = _TIMESTAMP.fullmatch(value)
    if m is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if not (1 <= month <= 12 and hour <= 23 and minute <= 59 and second <= 59):
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    return 1 <= day <= days


def format_timestamp(moment: datetime) -> str:
    """The wire spelling of an aware `datetime`, cut to milliseconds."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_timestamp(value: str) -> datetime:
    """An aware UTC `datetime` from the wire spelling (years 0001-9999)."""
    if not is_valid_timestamp(value):
        raise ValueError(f"{value!r} is not a timestamp of the form 2026-07-20T14:03:22.117Z")
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def decode_canonical_base64(value: str) -> bytes | None:
    """Exactly what a standard padded encoder writes, or None."""
    if _BASE64.fullmatch(value) is None:
        return None
    try:
        data = base64.b64decode(value, validate=True)
    except binascii.Error:
        return None
    # Non-zero unused bits before the padding decode too; refuse them.
    if base64.b64encode(data).decode("ascii") != value:
        return None
    return data


def truncate_text(text: str, max_bytes: int) -> str:
    """Cuts `text` to at most `max_bytes` of UTF-8 (marker included) on a
    character boundary, ending in `…[truncated]` when anything was removed."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text
    cut = max(0, max_bytes - len(TRUNCATION_MARKER.encode()))
    while cut > 0 and (raw[cut] & 0xC0) == 0x80:
        cut -= 1
    return raw[:cut].decode("utf-8", "replace") + TRUNCATION_MARKER


def truncate_message(message: str) -> str:
    return truncate_text(message, MAX_MESSAGE_BYTES)


def truncate_stack(stack: str) -> str:
    return truncate_text(stack, MAX_STACK_BYTES)
