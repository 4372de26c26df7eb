"""Decoding and the canonical encoding of the v1 envelope.

Fields are checked in the order of docs/envelope.md and the first failure
is reported, as the Rust codec does, so every codec answers a bad envelope
with the same code and path (compliance/fixtures holds them to it).
"""

from __future__ import annotations

import base64
from typing import TypeVar

from . import rules
from ._json import Json, JsonNumber, JsonSyntaxError, parse, write_string, write_value
from .errors import Code, EnvelopeError, invalid, malformed
from .model import VERSION, Attempt, CancelRequest, DeadReason, Envelope, ErrorInfo, Outcome, Status

DEFAULT_MAX_BYTES = 1024 * 1024
_U8 = 255
_U32 = 4294967295
_U64 = 18446744073709551615
_I64_MIN = -9223372036854775808

ENVELOPE_KEYS = (
    "envelope_version", "id", "queue", "handler_ref", "handler_version", "payload",
    "payload_content_type", "payload_ref", "headers", "status", "priority", "deferral_count",
    "attempt_count", "redrive_count", "claim_count", "next_attempt_at", "lease_expires_at",
    "created_at", "attempts", "dead_reason", "cancel_requested",
)  # fmt: skip
ATTEMPT_KEYS = ("attempt_no", "started_at", "finished_at", "outcome", "error")
ERROR_KEYS = ("type", "message", "detail", "stack")
DEAD_REASON_KEYS = ("code", "at", "by", "message")
CANCEL_REQUEST_KEYS = ("at", "by", "message")

T = TypeVar("T")


def _type_name(v: Json) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, JsonNumber):
        return "a number"
    if isinstance(v, list):
        return "an array"
    return "an object"


class _Fields:
    """One JSON object being taken apart; what is left is `extra`."""

    def __init__(self, value: Json, prefix: str) -> None:
        if not isinstance(value, dict):
            raise malformed(prefix, f"expected an object, found {_type_name(value)}")
        self.m = dict(value)
        self.prefix = prefix
        self.omitted: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def take(self, key: str) -> tuple[Json, bool]:
        if key in self.m:
            return self.m.pop(key), True
        return None, False

    def required(self, key: str) -> Json:
        v, ok = self.take(key)
        if not ok or v is None:
            raise malformed(self.path(key), "required field is missing or null")
        return v

    def as_str(self, key: str, v: Json) -> str:
        if not isinstance(v, str):
            raise malformed(self.path(key), f"expected a string, found {_type_name(v)}")
        return v

    def string(self, key: str) -> str:
        return self.as_str(key, self.required(key))

    def opt_str(self, key: str) -> str | None:
        v, ok = self.take(key)
        if not ok:
            self.omitted.add(key)
            return None
        return None if v is None else self.as_str(key, v)

    def as_uint(self, key: str, v: Json, maximum: int) -> int:
        path = self.path(key)
        if not isinstance(v, JsonNumber):
            raise malformed(path, f"expected an integer, found {_type_name(v)}")
        if not v.is_integer_text():
            raise malformed(path, f"expected an integer, found {v.text}")
        n = int(v.text)
        # As the Rust codec's exact numbers: -0 reads as a negative i64,
        # integers beyond u64 or i64 are no integer of a machine type.
        if v.text.startswith("-"):
            if n < _I64_MIN:
                raise malformed(path, f"expected an integer, found {v.text}")
            raise invalid(path, f"{v.text} is negative")
        if n > _U64:
            raise malformed(path, f"expected an integer, found {v.text}")
        if n > maximum:
            raise invalid(path, f"{n} is larger than {maximum}")
        return n

    def uint_or_zero(self, key: str, maximum: int) -> int:
        v, ok = self.take(key)
        if not ok:
            self.omitted.add(key)
            return 0
        return self.as_uint(key, v, maximum)

    def as_timestamp(self, key: str, v: Json) -> str:
        s = self.as_str(key, v)
        if not rules.is_valid_timestamp(s):
            raise invalid(
                self.path(key),
                f"{s!r} is not an RFC 3339 UTC timestamp of the form 2026-07-20T14:03:22.117Z",
            )
        return s

    def timestamp(self, key: str) -> str:
        return self.as_timestamp(key, self.required(key))

    def opt_timestamp(self, key: str) -> str | None:
        v, ok = self.take(key)
        if not ok:
            self.omitted.add(key)
            return None
        return None if v is None else self.as_timestamp(key, v)


def decode(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> Envelope:
    """Decodes and validates one envelope, refusing one whose canonical
    encoding is longer than `max_bytes`. Raises `EnvelopeError`."""
    env = decode_unlimited(data)
    check_size(env, max_bytes)
    return env


def decode_unlimited(data: bytes) -> Envelope:
    try:
        value = parse(data)
    except JsonSyntaxError as err:
        raise malformed("", str(err)) from None
    return decode_value(value)


def check_size(env: Envelope, max_bytes: int) -> None:
    size = len(encode(env))
    if size > max_bytes:
        raise EnvelopeError(
            Code.PAYLOAD_TOO_LARGE, "", f"the serialised envelope is {size} bytes; the limit is {max_bytes}"
        )


def decode_value(value: Json) -> Envelope:
    """Decodes an envelope already parsed by `rdq.envelope._json.parse`."""
    f = _Fields(value, "")
    # The version decides how to read everything else, so it comes first.
    ver = f.required("envelope_version")
    if isinstance(ver, JsonNumber) and ver.is_integer_text() and not ver.text.startswith("-"):
        if VERSION < int(ver.text) <= _U64:
            raise EnvelopeError(
                Code.UNSUPPORTED_ENVELOPE_VERSION,
                "envelope_version",
                f"version {ver.text} is newer than this engine's version 1",
            )
    if f.as_uint("envelope_version", ver, VERSION) == 0:
        raise invalid("envelope_version", "version 0 does not exist; the first is 1")

    ident = f.string("id")
    if not rules.is_valid_id(ident):
        raise invalid("id", f"{ident!r} is not a ULID (26 upper-case Crockford base32 characters)")
    queue = f.string("queue")
    rules.check_queue_name(queue)
    handler_ref = f.string("handler_ref")
    rules.check_handler_ref(handler_ref)
    handler_version = f.opt_str("handler_version")
    payload = rules.decode_canonical_base64(f.string("payload"))
    if payload is None:
        raise invalid("payload", "not canonical standard base64 with padding")
    content_type = f.string("payload_content_type")
    payload_ref = f.opt_str("payload_ref")

    headers: dict[str, str] = {}
    hv, ok = f.take("headers")
    if not ok:
        f.omitted.add("headers")
    elif isinstance(hv, dict):
        for key in sorted(hv):
            item = hv[key]
            if not isinstance(item, str):
                raise invalid("headers." + key, f"header values must be strings, found {_type_name(item)}")
            headers[key] = item
    else:
        raise malformed("headers", f"expected an object of strings, found {_type_name(hv)}")

    status_text = f.string("status")
    try:
        status = Status(status_text)
    except ValueError:
        raise invalid(
            "status", f"unknown status {status_text!r}; expected PENDING, IN_FLIGHT, SUCCEEDED or DEAD"
        ) from None

    priority = f.uint_or_zero("priority", _U8)
    deferral_count = f.uint_or_zero("deferral_count", _U32)
    attempt_count = f.uint_or_zero("attempt_count", _U32)
    redrive_count = f.uint_or_zero("redrive_count", _U32)
    claim_count = f.uint_or_zero("claim_count", _U32)
    next_attempt_at = f.opt_timestamp("next_attempt_at")
    lease_expires_at = f.opt_timestamp("lease_expires_at")
    created_at = f.timestamp("created_at")

    attempts: list[Attempt] = []
    av, ok = f.take("attempts")
    if not ok:
        f.omitted.add("attempts")
    elif isinstance(av, list):
        attempts = [_decode_attempt(item, f"attempts[{i}]") for i, item in enumerate(av)]
    else:
        raise malformed("attempts", f"expected an array, found {_type_name(av)}")

    # Unlike the other optional members, an unset reason is left out unless
    # its writer wrote it as null.
    dead_reason = None
    dv, dead_reason_null = f.take("dead_reason")
    if dv is not None:
        dead_reason = _decode_dead_reason(dv, "dead_reason")
        dead_reason_null = False

    # The same for a cancel request.
    cancel_requested = None
    cv, cancel_requested_null = f.take("cancel_requested")
    if cv is not None:
        cancel_requested = _decode_cancel_request(cv, "cancel_requested")
        cancel_requested_null = False

    return Envelope(
        id=ident,
        queue=queue,
        handler_ref=handler_ref,
        handler_version=handler_version,
        payload=payload,
        payload_content_type=content_type,
        payload_ref=payload_ref,
        headers=headers,
        status=status,
        priority=priority,
        deferral_count=deferral_count,
        attempt_count=attempt_count,
        redrive_count=redrive_count,
        claim_count=claim_count,
        next_attempt_at=next_attempt_at,
        lease_expires_at=lease_expires_at,
        created_at=created_at,
        attempts=attempts,
        dead_reason=dead_reason,
        cancel_requested=cancel_requested,
        extra=f.m,
        omitted=f.omitted,
        dead_reason_null=dead_reason_null,
        cancel_requested_null=cancel_requested_null,
    )


def _decode_attempt(value: Json, prefix: str) -> Attempt:
    f = _Fields(value, prefix)
    n = f.as_uint("attempt_no", f.required("attempt_no"), _U32)
    if n == 0:
        raise invalid(f.path("attempt_no"), "attempt numbers start at 1")
    started_at = f.timestamp("started_at")
    finished_at = f.opt_timestamp("finished_at")
    outcome_text = f.opt_str("outcome")
    outcome = None
    if outcome_text is not None:
        try:
            outcome = Outcome(outcome_text)
        except ValueError:
            raise invalid(
                f.path("outcome"),
                f"unknown outcome {outcome_text!r}; expected SUCCESS, RETRYABLE_FAILURE, "
                "PERMANENT_FAILURE or LEASE_EXPIRED",
            ) from None
    error = None
    ev, ok = f.take("error")
    if not ok:
        f.omitted.add("error")
    elif ev is not None:
        error = _decode_error(ev, f.path("error"))
    return Attempt(
        attempt_no=n,
        started_at=started_at,
        finished_at=finished_at,
        outcome=outcome,
        error=error,
        extra=f.m,
        omitted=f.omitted,
    )


def _decode_error(value: Json, prefix: str) -> ErrorInfo:
    f = _Fields(value, prefix)
    type_ = f.string("type")
    if type_ == "":
        raise invalid(f.path("type"), "the error type must not be empty")
    message = f.string("message")
    detail, ok = f.take("detail")
    if not ok:
        f.omitted.add("detail")
    stack = f.opt_str("stack")
    return ErrorInfo(type=type_, message=message, detail=detail, stack=stack, extra=f.m, omitted=f.omitted)


_CODE_RULE = "is not a reason code ([A-Z][A-Z0-9_], at most 64 bytes)"


def _decode_dead_reason(value: Json, prefix: str) -> DeadReason:
    f = _Fields(value, prefix)
    code = f.string("code")
    if not rules.is_valid_dead_reason_code(code):
        raise invalid(f.path("code"), f"{code!r} {_CODE_RULE}")
    at = f.timestamp("at")
    by = f.string("by")
    if by == "":
        raise invalid(f.path("by"), "who decided must not be empty")
    message = f.opt_str("message")
    return DeadReason(code=code, at=at, by=by, message=message, extra=f.m, omitted=f.omitted)


def _decode_cancel_request(value: Json, prefix: str) -> CancelRequest:
    f = _Fields(value, prefix)
    at = f.timestamp("at")
    by = f.string("by")
    if by == "":
        raise invalid(f.path("by"), "who asked must not be empty")
    message = f.opt_str("message")
    return CancelRequest(at=at, by=by, message=message, extra=f.m, omitted=f.omitted)


def _validate(env: Envelope) -> None:
    """Refuses what a decoder would refuse, so every encoding decodes again."""
    if not rules.is_valid_id(env.id):
        raise invalid("id", f"{env.id!r} is not a ULID (26 upper-case Crockford base32 characters)")
    rules.check_queue_name(env.queue)
    rules.check_handler_ref(env.handler_ref)
    Status(env.status)
    for path, limit, n in (
        ("priority", _U8, env.priority),
        ("deferral_count", _U32, env.deferral_count),
        ("attempt_count", _U32, env.attempt_count),
        ("redrive_count", _U32, env.redrive_count),
        ("claim_count", _U32, env.claim_count),
    ):
        if not 0 <= n <= limit:
            raise invalid(path, f"{n} is outside 0 to {limit}")
    for path, ts in (
        ("next_attempt_at", env.next_attempt_at),
        ("lease_expires_at", env.lease_expires_at),
        ("created_at", env.created_at),
    ):
        if ts is not None and not rules.is_valid_timestamp(ts):
            raise invalid(path, f"{ts!r} is not a timestamp")
    for key, value in env.headers.items():
        if not isinstance(value, str):
            raise invalid("headers." + key, "header values must be strings")
    for i, at in enumerate(env.attempts):
        prefix = f"attempts[{i}]"
        if not 1 <= at.attempt_no <= _U32:
            raise invalid(prefix + ".attempt_no", "attempt numbers start at 1")
        if not rules.is_valid_timestamp(at.started_at):
            raise invalid(prefix + ".started_at", f"{at.started_at!r} is not a timestamp")
        if at.finished_at is not None and not rules.is_valid_timestamp(at.finished_at):
            raise invalid(prefix + ".finished_at", f"{at.finished_at!r} is not a timestamp")
        if at.error is not None and at.error.type == "":
            raise invalid(prefix + ".error.type", "the error type must not be empty")
    r = env.dead_reason
    if r is not None:
        if not rules.is_valid_dead_reason_code(r.code):
            raise invalid("dead_reason.code", f"{r.code!r} {_CODE_RULE}")
        if not rules.is_valid_timestamp(r.at):
            raise invalid("dead_reason.at", f"{r.at!r} is not a timestamp")
        if r.by == "":
            raise invalid("dead_reason.by", "who decided must not be empty")
    c = env.cancel_requested
    if c is not None:
        if not rules.is_valid_timestamp(c.at):
            raise invalid("cancel_requested.at", f"{c.at!r} is not a timestamp")
        if c.by == "":
            raise invalid("cancel_requested.by", "who asked must not be empty")


class _Writer:
    """Writes one compact JSON object member by member."""

    def __init__(self, out: list[str]) -> None:
        self.out = out
        self.first = True
        out.append("{")

    def key(self, k: str) -> None:
        if not self.first:
            self.out.append(",")
        self.first = False
        write_string(self.out, k)
        self.out.append(":")

    def string(self, k: str, v: str | None) -> None:
        self.key(k)
        if v is None:
            self.out.append("null")
        else:
            write_string(self.out, v)

    def integer(self, k: str, v: int) -> None:
        self.key(k)
        self.out.append(str(int(v)))

    def value(self, k: str, v: Json) -> None:
        self.key(k)
        write_value(self.out, v)

    def extra(self, extra: dict[str, Json], known: tuple[str, ...]) -> None:
        for k in sorted(extra):
            if k not in known:
                self.value(k, extra[k])

    def close(self) -> None:
        self.out.append("}")


def _keep(omitted: set[str], key: str, is_default: bool) -> bool:
    """A member the writer left out is left out again while it holds its default."""
    return not (key in omitted and is_default)


def encode(env: Envelope) -> bytes:
    """The canonical encoding: compact JSON, known members in the order of
    docs/envelope.md, then unknown members sorted by key, at every level."""
    _validate(env)
    out: list[str] = []
    w = _Writer(out)
    o = env.omitted
    w.integer("envelope_version", VERSION)
    w.string("id", env.id)
    w.string("queue", env.queue)
    w.string("handler_ref", env.handler_ref)
    if _keep(o, "handler_version", env.handler_version is None):
        w.string("handler_version", env.handler_version)
    w.string("payload", base64.b64encode(env.payload).decode("ascii"))
    w.string("payload_content_type", env.payload_content_type)
    if _keep(o, "payload_ref", env.payload_ref is None):
        w.string("payload_ref", env.payload_ref)
    if _keep(o, "headers", not env.headers):
        w.key("headers")
        hw = _Writer(out)
        for k in sorted(env.headers):
            hw.string(k, env.headers[k])
        hw.close()
    w.string("status", Status(env.status).value)
    for key, n in (
        ("priority", env.priority),
        ("deferral_count", env.deferral_count),
        ("attempt_count", env.attempt_count),
        ("redrive_count", env.redrive_count),
        ("claim_count", env.claim_count),
    ):
        if _keep(o, key, n == 0):
            w.integer(key, n)
    if _keep(o, "next_attempt_at", env.next_attempt_at is None):
        w.string("next_attempt_at", env.next_attempt_at)
    if _keep(o, "lease_expires_at", env.lease_expires_at is None):
        w.string("lease_expires_at", env.lease_expires_at)
    w.string("created_at", env.created_at)
    if _keep(o, "attempts", not env.attempts):
        w.key("attempts")
        out.append("[")
        for i, at in enumerate(env.attempts):
            if i:
                out.append(",")
            _write_attempt(out, at)
        out.append("]")
    if env.dead_reason is not None:
        w.key("dead_reason")
        _write_dead_reason(out, env.dead_reason)
    elif env.dead_reason_null:
        w.string("dead_reason", None)
    if env.cancel_requested is not None:
        w.key("cancel_requested")
        _write_cancel_request(out, env.cancel_requested)
    elif env.cancel_requested_null:
        w.string("cancel_requested", None)
    w.extra(env.extra, ENVELOPE_KEYS)
    w.close()
    return "".join(out).encode("utf-8")


def _write_attempt(out: list[str], at: Attempt) -> None:
    w = _Writer(out)
    o = at.omitted
    w.integer("attempt_no", at.attempt_no)
    w.string("started_at", at.started_at)
    if _keep(o, "finished_at", at.finished_at is None):
        w.string("finished_at", at.finished_at)
    if _keep(o, "outcome", at.outcome is None):
        w.string("outcome", None if at.outcome is None else Outcome(at.outcome).value)
    if _keep(o, "error", at.error is None):
        w.key("error")
        if at.error is None:
            out.append("null")
        else:
            _write_error(out, at.error)
    w.extra(at.extra, ATTEMPT_KEYS)
    w.close()


def _write_error(out: list[str], e: ErrorInfo) -> None:
    w = _Writer(out)
    w.string("type", e.type)
    w.string("message", e.message)
    if _keep(e.omitted, "detail", e.detail is None):
        w.value("detail", e.detail)
    if _keep(e.omitted, "stack", e.stack is None):
        w.string("stack", e.stack)
    w.extra(e.extra, ERROR_KEYS)
    w.close()


def _write_dead_reason(out: list[str], r: DeadReason) -> None:
    w = _Writer(out)
    w.string("code", r.code)
    w.string("at", r.at)
    w.string("by", r.by)
    if _keep(r.omitted, "message", r.message is None):
        w.string("message", r.message)
    w.extra(r.extra, DEAD_REASON_KEYS)
    w.close()


def _write_cancel_request(out: list[str], r: CancelRequest) -> None:
    w = _Writer(out)
    w.string("at", r.at)
    w.string("by", r.by)
    if _keep(r.omitted, "message", r.message is None):
        w.string("message", r.message)
    w.extra(r.extra, CANCEL_REQUEST_KEYS)
    w.close()
