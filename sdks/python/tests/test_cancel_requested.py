"""The envelope's `cancel_requested`, without a server: built in Python it
encodes as rdq writes it (last, after `dead_reason`), an unset request is
left out unless written as null, the codec refuses what a decoder would
refuse, and the gRPC mapping carries it as the server does."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdq import envelope
from rdq._proto import cancel_request_from_proto, envelope_from_proto
from rdq.envelope import CancelRequest, DeadReason, DeadReasonCode
from rdq.v1 import envelope_pb2

FIXTURES = Path(__file__).resolve().parents[3] / "compliance" / "fixtures"
BASE = (
    b'{"envelope_version":1,"id":"01J2ZK7Q8XW5H3N9G4T6B8RDQ0","queue":"q","handler_ref":"h",'
    b'"payload":"","payload_content_type":"application/json","status":"IN_FLIGHT","created_at":"2026-07-20T14:03:22.117Z"'
)


def _fixture(name: str) -> bytes:
    return (FIXTURES / "valid" / name).read_bytes()


def test_a_cancel_request_built_in_python_encodes_as_rust_writes_it() -> None:
    want = _fixture("cancel_requested_running.json")
    env = envelope.decode(want)
    assert env.cancel_requested == CancelRequest(
        at="2026-07-20T14:03:30.000Z", by="ops@example.com", message="customer withdrew the order"
    )
    env.cancel_requested = None
    assert b"cancel_requested" not in envelope.encode(env)
    env.cancel_requested = CancelRequest(
        at="2026-07-20T14:03:30.000Z", by="ops@example.com", message="customer withdrew the order"
    )
    assert envelope.encode(env) == want


def test_it_comes_after_the_dead_reason() -> None:
    env = envelope.decode(BASE + b"}")
    env.dead_reason = DeadReason(code=DeadReasonCode.CANCELLED, at=env.created_at, by="ops", message="m")
    env.cancel_requested = CancelRequest(at=env.created_at, by="ops", message="m")
    assert envelope.encode(env).endswith(
        b'"dead_reason":{"code":"CANCELLED","at":"2026-07-20T14:03:22.117Z","by":"ops","message":"m"},'
        b'"cancel_requested":{"at":"2026-07-20T14:03:22.117Z","by":"ops","message":"m"}}'
    )


def test_an_unset_request_is_left_out_unless_written_as_null() -> None:
    assert b"cancel_requested" not in envelope.encode(envelope.decode(BASE + b"}"))
    written = envelope.decode(BASE + b',"cancel_requested":null}')
    assert written.cancel_requested is None and written.cancel_requested_null
    assert envelope.encode(written).endswith(b',"cancel_requested":null}')
    written.mark_written()
    assert b"cancel_requested" not in envelope.encode(written)


def test_a_message_left_out_stays_out_and_unknown_members_are_kept() -> None:
    env = envelope.decode(
        BASE + b',"cancel_requested":{"zz":1.50,"by":"ops","aa":[1E2],"at":"2026-07-20T14:03:22.117Z"}}'
    )
    assert env.cancel_requested is not None and env.cancel_requested.message is None
    assert envelope.encode(env).endswith(
        b'"cancel_requested":{"at":"2026-07-20T14:03:22.117Z","by":"ops","aa":[1e+2],"zz":1.50}}'
    )
    env.cancel_requested = CancelRequest(at=env.created_at, by="ops")
    assert envelope.encode(env).endswith(b'"by":"ops","message":null}}')


@pytest.mark.parametrize(
    ("request_", "path"),
    [
        (CancelRequest(at="2026-07-20T14:03:22Z", by="ops"), "cancel_requested.at"),
        (CancelRequest(at="2026-07-20T14:03:22.117Z", by=""), "cancel_requested.by"),
    ],
)
def test_encode_refuses_a_request_a_decoder_would_refuse(request_: CancelRequest, path: str) -> None:
    env = envelope.decode(BASE + b"}")
    env.cancel_requested = request_
    with pytest.raises(envelope.EnvelopeError) as refused:
        envelope.encode(env)
    assert (refused.value.code, refused.value.path) == (envelope.Code.INVALID_FIELD, path)


def _proto() -> envelope_pb2.Envelope:
    return envelope_pb2.Envelope(
        envelope_version=1,
        id="01J2ZK7Q8XW5H3N9G4T6B8RDQ0",
        queue="q",
        handler_ref="h",
        payload_content_type="application/json",
        status=envelope_pb2.IN_FLIGHT,
        created_at="2026-07-20T14:03:22.117Z",
        omitted=["handler_version", "payload_ref", "headers", "priority", "deferral_count", "attempt_count",
                 "redrive_count", "claim_count", "next_attempt_at", "lease_expires_at", "attempts",
                 "dead_reason"],
    )  # fmt: skip


def test_the_grpc_mapping_is_null_unless_omitted_names_it() -> None:
    message = _proto()
    assert envelope.encode(envelope_from_proto(message)).endswith(b',"cancel_requested":null}')
    message.omitted.append("cancel_requested")
    assert b"cancel_requested" not in envelope.encode(envelope_from_proto(message))
    message = _proto()
    message.cancel_requested.at = "2026-07-20T14:03:30.000Z"
    message.cancel_requested.by = "ops"
    message.cancel_requested.omitted.append("message")
    message.cancel_requested.unknown_json = '{"n":1.50}'
    assert envelope.encode(envelope_from_proto(message)).endswith(
        b',"cancel_requested":{"at":"2026-07-20T14:03:30.000Z","by":"ops","n":1.50}}'
    )


def test_the_grpc_mapping_refuses_contradictions() -> None:
    with_value = _proto()
    with_value.cancel_requested.at = "2026-07-20T14:03:30.000Z"
    with_value.cancel_requested.by = "ops"
    with_value.omitted.append("cancel_requested")
    with pytest.raises(ValueError):
        envelope_from_proto(with_value)
    r = envelope_pb2.CancelRequest(at="2026-07-20T14:03:30.000Z", by="ops", message="m", omitted=["message"])
    with pytest.raises(ValueError):
        cancel_request_from_proto(r)
    r = envelope_pb2.CancelRequest(at="2026-07-20T14:03:30.000Z", by="ops", omitted=["by"])
    with pytest.raises(ValueError):
        cancel_request_from_proto(r)
