"""The envelope's `dead_reason`, without a server: built in Python it
encodes as rdq writes it, an unset reason is left out unless written as
null, the codec refuses what a decoder would refuse, and the gRPC mapping
of the Work stream carries it (and the `omitted` name) as the server does."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdq import envelope
from rdq._proto import envelope_from_proto
from rdq.envelope import Attempt, DeadReason, DeadReasonCode, Envelope, ErrorInfo, Outcome, Status
from rdq.envelope._json import dumps
from rdq.v1 import envelope_pb2

FIXTURES = Path(__file__).resolve().parents[3] / "compliance" / "fixtures"
BASE = (
    b'{"envelope_version":1,"id":"01J2ZK7Q8XW5H3N9G4T6B8RDQ0","queue":"q","handler_ref":"h",'
    b'"payload":"","payload_content_type":"application/json","status":"DEAD","created_at":"2026-07-20T14:03:22.117Z"'
)


def _fixture(name: str) -> bytes:
    return (FIXTURES / "valid" / name).read_bytes()


def test_a_dead_reason_built_in_python_encodes_as_rust_writes_it() -> None:
    env = envelope.decode(_fixture("dead_reason_null.json"))
    cause = ErrorInfo(type="app.InvalidCard", message="card 4242 was declined")
    env.status = Status.DEAD
    env.attempt_count = 1
    env.claim_count = 1
    env.next_attempt_at = None
    env.attempts = [
        Attempt(
            attempt_no=1,
            started_at="2026-07-20T14:03:22.200Z",
            finished_at="2026-07-20T14:03:22.950Z",
            outcome=Outcome.PERMANENT_FAILURE,
            error=cause,
        )
    ]
    env.dead_reason = DeadReason(
        code=DeadReasonCode.PERMANENT_FAILURE,
        at="2026-07-20T14:03:22.950Z",
        by="worker",
        message=f"{cause.type}: {cause.message}",
    )
    assert envelope.encode(env) == _fixture("dead_reason_permanent.json")


def test_an_unset_dead_reason_is_left_out_unless_written_as_null() -> None:
    fresh = Envelope(
        id="01J2ZK7Q8XW5H3N9G4T6B8RDQ0",
        queue="q",
        handler_ref="h",
        payload=b"",
        payload_content_type="application/json",
        status=Status.PENDING,
        created_at="2026-07-20T14:03:22.117Z",
    )
    assert b"dead_reason" not in envelope.encode(fresh)
    assert b"dead_reason" not in envelope.encode(envelope.decode(BASE + b"}"))

    written = envelope.decode(BASE + b',"dead_reason":null}')
    assert written.dead_reason is None and written.dead_reason_null
    assert envelope.encode(written).endswith(b',"dead_reason":null}')
    written.mark_written()
    assert b"dead_reason" not in envelope.encode(written)


def test_a_message_left_out_stays_out_and_a_none_one_is_written_as_null() -> None:
    env = envelope.decode(BASE + b',"dead_reason":{"code":"CANCELLED","at":"2026-07-20T14:03:22.117Z","by":"ops"}}')
    assert env.dead_reason is not None and env.dead_reason.message is None
    assert envelope.encode(env).endswith(b'"by":"ops"}}')
    env.dead_reason = DeadReason(code=DeadReasonCode.CANCELLED, at=env.created_at, by="ops")
    assert envelope.encode(env).endswith(b'"by":"ops","message":null}}')


def test_members_a_newer_writer_added_to_a_reason_are_kept_sorted_after_the_known_ones() -> None:
    env = envelope.decode(
        BASE + b',"dead_reason":{"zz":1.50,"by":"billing","aa":[1E2],"at":"2026-07-20T14:03:22.117Z","code":"QUOTA"}}'
    )
    assert env.dead_reason is not None and env.dead_reason.code == "QUOTA"
    assert envelope.encode(env).endswith(
        b'"dead_reason":{"code":"QUOTA","at":"2026-07-20T14:03:22.117Z","by":"billing","aa":[1e+2],"zz":1.50}}'
    )


@pytest.mark.parametrize(
    ("reason", "path"),
    [
        (DeadReason(code="cancelled", at="2026-07-20T14:03:22.117Z", by="ops"), "dead_reason.code"),
        (DeadReason(code="A" * 65, at="2026-07-20T14:03:22.117Z", by="ops"), "dead_reason.code"),
        (DeadReason(code="", at="2026-07-20T14:03:22.117Z", by="ops"), "dead_reason.code"),
        (DeadReason(code="CANCELLED", at="2026-07-20T14:03:22Z", by="ops"), "dead_reason.at"),
        (DeadReason(code="CANCELLED", at="2026-07-20T14:03:22.117Z", by=""), "dead_reason.by"),
    ],
)
def test_encode_refuses_a_dead_reason_a_decoder_would_refuse(reason: DeadReason, path: str) -> None:
    env = envelope.decode(BASE + b"}")
    env.dead_reason = reason
    with pytest.raises(envelope.EnvelopeError) as refused:
        envelope.encode(env)
    assert (refused.value.code, refused.value.path) == (envelope.Code.INVALID_FIELD, path)


def test_reason_codes_are_upper_case_words_of_at_most_64_bytes() -> None:
    good = [*DeadReasonCode, "QUOTA_REVOKED", "A", "A1_", "A" * 64]
    bad = ["", "_A", "1A", "a", "Cancelled", "A-B", "A B", "É", "A" * 65, "A\n"]
    assert [c for c in good if not envelope.is_valid_dead_reason_code(c)] == []
    assert [c for c in bad if envelope.is_valid_dead_reason_code(c)] == []


# -- the gRPC mapping --------------------------------------------------------


def _to_proto(env: Envelope) -> envelope_pb2.Envelope:
    """The message the server sends for `env` (crates/rdq-grpc/src/codec.rs):
    left-out members named in `omitted`, `dead_reason` among them when the
    envelope has none and its writer did not write null."""

    def unknown(extra: dict[str, envelope.Json]) -> str:
        return dumps(extra) if extra else ""

    def order(names: set[str], known: tuple[str, ...]) -> list[str]:
        return [k for k in known if k in names]

    omitted = set(env.omitted)
    if env.dead_reason is None and not env.dead_reason_null:
        omitted.add("dead_reason")
    if env.cancel_requested is None and not env.cancel_requested_null:
        omitted.add("cancel_requested")
    p = envelope_pb2.Envelope(
        envelope_version=env.envelope_version,
        id=env.id,
        queue=env.queue,
        handler_ref=env.handler_ref,
        payload=env.payload,
        payload_content_type=env.payload_content_type,
        headers=env.headers,
        status=getattr(envelope_pb2, env.status.value),
        priority=env.priority,
        deferral_count=env.deferral_count,
        attempt_count=env.attempt_count,
        redrive_count=env.redrive_count,
        claim_count=env.claim_count,
        created_at=env.created_at,
        omitted=order(omitted, envelope.codec.ENVELOPE_KEYS),
        unknown_json=unknown(env.extra),
    )
    for name in ("handler_version", "payload_ref", "next_attempt_at", "lease_expires_at"):
        if getattr(env, name) is not None:
            setattr(p, name, getattr(env, name))
    for a in env.attempts:
        pa = p.attempts.add(
            attempt_no=a.attempt_no,
            started_at=a.started_at,
            outcome=0 if a.outcome is None else getattr(envelope_pb2, a.outcome.value),
            omitted=order(a.omitted, envelope.codec.ATTEMPT_KEYS),
            unknown_json=unknown(a.extra),
        )
        if a.finished_at is not None:
            pa.finished_at = a.finished_at
        if a.error is not None:
            e = a.error
            pa.error.type, pa.error.message = e.type, e.message
            pa.error.omitted.extend(order(e.omitted, envelope.codec.ERROR_KEYS))
            pa.error.unknown_json = unknown(e.extra)
            if e.detail is not None:
                pa.error.detail_json = dumps(e.detail)
            if e.stack is not None:
                pa.error.stack = e.stack
    r = env.dead_reason
    if r is not None:
        p.dead_reason.code, p.dead_reason.at, p.dead_reason.by = r.code, r.at, r.by
        p.dead_reason.omitted.extend(order(r.omitted, envelope.codec.DEAD_REASON_KEYS))
        p.dead_reason.unknown_json = unknown(r.extra)
        if r.message is not None:
            p.dead_reason.message = r.message
    c = env.cancel_requested
    if c is not None:
        p.cancel_requested.at, p.cancel_requested.by = c.at, c.by
        p.cancel_requested.omitted.extend(order(c.omitted, envelope.codec.CANCEL_REQUEST_KEYS))
        p.cancel_requested.unknown_json = unknown(c.extra)
        if c.message is not None:
            p.cancel_requested.message = c.message
    return p


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "valid").glob("*.json")))
def test_every_valid_fixture_comes_back_from_its_grpc_message_byte_for_byte(name: str) -> None:
    data = _fixture(name)
    canonical = envelope.encode(envelope.decode(data, max_bytes=1 << 62))
    env = envelope.decode(canonical, max_bytes=1 << 62)
    assert envelope.encode(envelope_from_proto(_to_proto(env))) == canonical
    assert envelope_from_proto(_to_proto(env)) == env


def test_a_message_without_a_reason_is_null_unless_omitted_names_it() -> None:
    env = envelope.decode(BASE + b"}")
    message = _to_proto(env)
    assert "dead_reason" in message.omitted
    assert b"dead_reason" not in envelope.encode(envelope_from_proto(message))
    message.omitted.remove("dead_reason")
    assert envelope.encode(envelope_from_proto(message)).endswith(b',"dead_reason":null}')


def test_omitted_names_a_member_with_a_value_or_an_unknown_one_is_refused() -> None:
    env = envelope.decode(_fixture("dead_reason_cancelled.json"))
    with_value = _to_proto(env)
    with_value.omitted.append("dead_reason")
    unknown = _to_proto(env)
    unknown.omitted.append("colour")
    message_too = _to_proto(env)
    message_too.dead_reason.omitted.append("message")
    for bad in (with_value, unknown, message_too):
        with pytest.raises(ValueError):
            envelope_from_proto(bad)
