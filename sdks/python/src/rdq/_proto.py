"""`rdq.v1.Envelope` (protobuf) to the JSON model, as docs/grpc.md maps
them: unset optional fields are null unless named in `omitted`, unknown
members arrive as canonical JSON text in `unknown_json`."""

from __future__ import annotations

from .envelope import Attempt, Envelope, ErrorInfo, Outcome, Status
from .envelope._json import Json, parse
from .v1 import envelope_pb2

_STATUS = {1: Status.PENDING, 2: Status.IN_FLIGHT, 3: Status.SUCCEEDED, 4: Status.DEAD}
_OUTCOME = {
    1: Outcome.SUCCESS,
    2: Outcome.RETRYABLE_FAILURE,
    3: Outcome.PERMANENT_FAILURE,
    4: Outcome.LEASE_EXPIRED,
}


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
        extra=_unknown(p.unknown_json),
        omitted=set(p.omitted),
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
            omitted=set(e.omitted),
        )
    return Attempt(
        attempt_no=a.attempt_no,
        started_at=a.started_at,
        finished_at=_opt(a, "finished_at"),
        outcome=_OUTCOME.get(a.outcome),
        error=error,
        extra=_unknown(a.unknown_json),
        omitted=set(a.omitted),
    )
