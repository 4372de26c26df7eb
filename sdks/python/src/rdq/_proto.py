"""`rdq.v1.Envelope` (protobuf) to the JSON model, as docs/grpc.md maps
them (and crates/rdq-grpc/src/codec.rs does): unset optional fields are
null unless named in `omitted`, unknown members arrive as canonical JSON
text in `unknown_json`. An unset `dead_reason` (or `cancel_requested`) is
null too unless `omitted` names it, which it does for every task without
one."""

from __future__ import annotations

from collections.abc import Sequence

from .envelope import Attempt, CancelRequest, DeadReason, Envelope, ErrorInfo, Outcome, Status
from .envelope._json import Json, parse
from .v1 import envelope_pb2

_STATUS = {1: Status.PENDING, 2: Status.IN_FLIGHT, 3: Status.SUCCEEDED, 4: Status.DEAD}
_OUTCOME = {
    1: Outcome.SUCCESS,
    2: Outcome.RETRYABLE_FAILURE,
    3: Outcome.PERMANENT_FAILURE,
    4: Outcome.LEASE_EXPIRED,
}


_ENVELOPE_OPTIONAL = (
    "handler_version", "payload_ref", "headers", "priority", "deferral_count", "attempt_count",
    "redrive_count", "claim_count", "next_attempt_at", "lease_expires_at", "attempts", "dead_reason",
    "cancel_requested",
)  # fmt: skip
_ATTEMPT_OPTIONAL = ("finished_at", "outcome", "error")
_ERROR_OPTIONAL = ("detail", "stack")
_DEAD_REASON_OPTIONAL = ("message",)
_CANCEL_REQUEST_OPTIONAL = ("message",)


def _omitted(names: Sequence[str], allowed: tuple[str, ...], path: str) -> set[str]:
    """`omitted` as the server checks it: members a writer may leave out, each once."""
    out: set[str] = set()
    for name in names:
        if name not in allowed:
            raise ValueError(f"{path}: {name!r} is not a member a writer may leave out")
        if name in out:
            raise ValueError(f"{path}: names {name!r} twice")
        out.add(name)
    return out


def _unknown(text: str) -> dict[str, Json]:
    if not text:
        return {}
    value = parse(text.encode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError("unknown_json is not a JSON object")
    return value


def _opt(msg: object, name: str) -> str | None:
    return getattr(msg, name) if msg.HasField(name) else None  # type: ignore[attr-defined]


def envelope_from_proto(p: envelope_pb2.Envelope) -> Envelope:
    # The model marks the opposite of `omitted` for dead_reason and
    # cancel_requested: a null one.
    omitted = _omitted(p.omitted, _ENVELOPE_OPTIONAL, "omitted")
    has_reason = p.HasField("dead_reason")
    if has_reason and "dead_reason" in omitted:
        raise ValueError("omitted: names 'dead_reason', which has a value")
    dead_reason_null = not has_reason and "dead_reason" not in omitted
    omitted.discard("dead_reason")
    has_request = p.HasField("cancel_requested")
    if has_request and "cancel_requested" in omitted:
        raise ValueError("omitted: names 'cancel_requested', which has a value")
    cancel_requested_null = not has_request and "cancel_requested" not in omitted
    omitted.discard("cancel_requested")
    return Envelope(
        envelope_version=p.envelope_version,
        id=p.id,
        queue=p.queue,
        handler_ref=p.handler_ref,
        handler_version=_opt(p, "handler_version"),
        payload=p.payload,
        payload_content_type=p.payload_content_type,
        payload_ref=_opt(p, "payload_ref"),
        headers=dict(p.headers),
        status=_STATUS[p.status],
        priority=p.priority,
        deferral_count=p.deferral_count,
        attempt_count=p.attempt_count,
        redrive_count=p.redrive_count,
        claim_count=p.claim_count,
        next_attempt_at=_opt(p, "next_attempt_at"),
        lease_expires_at=_opt(p, "lease_expires_at"),
        created_at=p.created_at,
        attempts=[_attempt(a) for a in p.attempts],
        dead_reason=_dead_reason(p.dead_reason) if has_reason else None,
        cancel_requested=cancel_request_from_proto(p.cancel_requested) if has_request else None,
        extra=_unknown(p.unknown_json),
        omitted=omitted,
        dead_reason_null=dead_reason_null,
        cancel_requested_null=cancel_requested_null,
    )


def _dead_reason(r: envelope_pb2.DeadReason) -> DeadReason:
    omitted = _omitted(r.omitted, _DEAD_REASON_OPTIONAL, "dead_reason.omitted")
    if r.HasField("message") and "message" in omitted:
        raise ValueError("dead_reason.omitted: names 'message', which has a value")
    return DeadReason(
        code=r.code,
        at=r.at,
        by=r.by,
        message=_opt(r, "message"),
        extra=_unknown(r.unknown_json),
        omitted=omitted,
    )


def cancel_request_from_proto(r: envelope_pb2.CancelRequest) -> CancelRequest:
    """An envelope's `cancel_requested`, or a `WorkCancel`'s `request`."""
    omitted = _omitted(r.omitted, _CANCEL_REQUEST_OPTIONAL, "cancel_requested.omitted")
    if r.HasField("message") and "message" in omitted:
        raise ValueError("cancel_requested.omitted: names 'message', which has a value")
    return CancelRequest(
        at=r.at,
        by=r.by,
        message=_opt(r, "message"),
        extra=_unknown(r.unknown_json),
        omitted=omitted,
    )


def _attempt(a: envelope_pb2.AttemptRecord) -> Attempt:
    error = None
    if a.HasField("error"):
        e = a.error
        detail: Json = parse(e.detail_json.encode("utf-8")) if e.HasField("detail_json") else None
        error = ErrorInfo(
            type=e.type,
            message=e.message,
            detail=detail,
            stack=_opt(e, "stack"),
            extra=_unknown(e.unknown_json),
            omitted=_omitted(e.omitted, _ERROR_OPTIONAL, "error.omitted"),
        )
    return Attempt(
        attempt_no=a.attempt_no,
        started_at=a.started_at,
        finished_at=_opt(a, "finished_at"),
        outcome=_OUTCOME.get(a.outcome),
        error=error,
        extra=_unknown(a.unknown_json),
        omitted=_omitted(a.omitted, _ATTEMPT_OPTIONAL, "attempts.omitted"),
    )
