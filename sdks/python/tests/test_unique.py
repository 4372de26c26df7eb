"""Unique submits (docs/uniqueness.md) against a real server on the memory
store, the one store with capability `unique` so far: the conflict and its
holder on both transports, async and sync, single and batch; keys derived
from the payload; replace and debounce of a waiting holder; bad input."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

import rdq
from conftest import TOKEN, Server, start_server, stop_server
from rdq import _calls
from rdq.envelope import parse_timestamp

TRANSPORTS = ["grpc", "http"]


@pytest.fixture(scope="module")
def memory_server() -> Iterator[Server]:
    s = start_server("memory")
    yield s
    stop_server(s)


def _capabilities(server: Server) -> dict[str, bool]:
    resp = httpx.get(server.url + "/v1/capabilities", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10)
    resp.raise_for_status()
    caps: dict[str, bool] = resp.json()["capabilities"]
    return caps


def test_the_memory_store_has_capability_unique(memory_server: Server) -> None:
    assert _capabilities(memory_server).get("unique") is True


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_second_submit_of_a_key_names_the_holder(memory_server: Server, queue: str, transport: str) -> None:
    with memory_server.client(transport) as client:
        first = client.submit(queue, "charge", {"n": 1}, unique=rdq.Unique(key="invoice-7"))
        assert first.headers["rdq.unique_key"] == "invoice-7"
        assert first.headers["rdq.unique_scope"] == "queue"
        assert first.headers["rdq.unique_hold"] == "until_finished"
        with pytest.raises(rdq.UniqueHeld) as held:
            client.submit(queue, "charge", {"n": 2}, unique=rdq.Unique(key="invoice-7"))
        err = held.value
        assert isinstance(err, rdq.Conflict)
        assert (err.code, err.status, err.holder, err.hold) == ("UNIQUE_HELD", 409, first.id, "until_finished")
        assert err.problem["holder"] == first.id
        # Nothing was written.
        assert [env.id for env in client.list_tasks(queue).items] == [first.id]
        # Another key, or the same key in another queue, is free.
        other = client.submit(queue, "charge", {"n": 3}, unique=rdq.Unique(key="invoice-8"))
        elsewhere = client.submit(queue + "-b", "charge", {"n": 4}, unique=rdq.Unique(key="invoice-7"))
        assert len({first.id, other.id, elsewhere.id}) == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_async_client_raises_unique_held_too(memory_server: Server, queue: str, transport: str) -> None:
    async def run() -> None:
        async with memory_server.async_client(transport) as client:
            unique = rdq.Unique(key="nightly", hold="until_succeeded", scope="handler")
            first = await client.submit(queue, "report", None, unique=unique)
            assert first.headers["rdq.unique_scope"] == "handler"
            with pytest.raises(rdq.UniqueHeld) as held:
                await client.submit(queue, "report", None, unique=unique)
            assert (held.value.holder, held.value.hold) == (first.id, "until_succeeded")
            # Scope `handler`: another handler of the queue holds its own.
            await client.submit(queue, "other-report", None, unique=unique)
            results = await client.submit_batch([rdq.Submit(queue, "report", None, unique=unique)])
            assert (results[0].code, results[0].holder) == ("UNIQUE_HELD", first.id)

    asyncio.run(run())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_key_from_derives_one_key_from_reordered_members(memory_server: Server, queue: str, transport: str) -> None:
    with memory_server.client(transport) as client:
        unique = rdq.Unique(key_from=["/customer", "/month"])
        first = client.submit(
            queue, "bill", {"month": "2026-12", "customer": {"id": 42, "region": "eu"}, "note": "a"}, unique=unique
        )
        # The key is the SHA-256 of the canonical JSON array of the values.
        canonical = json.dumps([{"id": 42, "region": "eu"}, "2026-12"], sort_keys=True, separators=(",", ":"))
        assert first.headers["rdq.unique_key"] == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
        # The same values written in another order (and other members that
        # the pointers do not reach) are the same key.
        reordered = {"customer": {"region": "eu", "id": 42}, "note": "b", "month": "2026-12"}
        assert json.dumps(reordered) != json.dumps(first.payload_json())
        with pytest.raises(rdq.UniqueHeld) as held:
            client.submit(queue, "bill", reordered, unique=unique)
        assert held.value.holder == first.id
        # Another value is another key.
        client.submit(queue, "bill", {"customer": {"id": 43, "region": "eu"}, "month": "2026-12"}, unique=unique)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_replace_gives_a_waiting_holder_the_new_payload(memory_server: Server, queue: str, transport: str) -> None:
    with memory_server.client(transport) as client:
        first = client.submit(queue, "sync", {"version": 1}, headers={"who": "a"}, unique=rdq.Unique(key="doc-1"))
        replace = rdq.Unique(key="doc-1", on_conflict="replace")
        again = client.submit(queue, "sync", {"version": 2}, headers={"who": "b"}, unique=replace)
        assert again.id == first.id
        assert again.payload_json() == {"version": 2}
        assert again.headers["who"] == "b"
        stored = client.get(first.id)
        assert (stored.payload_json(), stored.created_at, stored.status) == (
            {"version": 2},
            first.created_at,
            "PENDING",
        )
        assert [env.id for env in client.list_tasks(queue).items] == [first.id]
        # In a batch, the holder is answered as an idempotent repeat (200).
        (result,) = client.submit_batch([rdq.Submit(queue, "sync", {"version": 3}, unique=replace)])
        assert result.ok and result.status == 200 and result.error is None
        assert result.envelope is not None and result.envelope.id == first.id
        assert result.envelope.payload_json() == {"version": 3}
        # A holder in flight is never replaced.
        (leased,) = client._run(_calls.claim(queue, 1, None))
        assert leased.id == first.id
        with pytest.raises(rdq.UniqueHeld) as held:
            client.submit(queue, "sync", {"version": 4}, unique=replace)
        assert held.value.holder == first.id
        assert client.get(first.id).payload_json() == {"version": 3}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_existing_answers_the_holder_and_is_the_idempotency_key(
    memory_server: Server, queue: str, transport: str
) -> None:
    with memory_server.client(transport) as client:
        existing = rdq.Unique(key="doc-2", on_conflict="existing")
        first = client.submit(queue, "sync", {"version": 1}, unique=existing)
        again = client.submit(queue, "sync", {"version": 2}, unique=existing)
        assert again.id == first.id
        assert again.payload_json() == {"version": 1}
        keyed = client.submit(queue, "sync", {"version": 3}, idempotency_key="order-1")
        same = rdq.Unique(key="order-1", hold="forever", on_conflict="existing")
        (result,) = client.submit_batch([rdq.Submit(queue, "sync", {"version": 4}, unique=same)])
        assert result.ok and result.status == 200
        assert result.envelope is not None and result.envelope.id == keyed.id


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_debounce_moves_the_holders_due_time(memory_server: Server, queue: str, transport: str) -> None:
    with memory_server.client(transport) as client:
        first = client.submit(queue, "index", {"n": 1}, delay=60, unique=rdq.Unique(key="reindex"))
        debounce = rdq.Unique(key="reindex", on_conflict="debounce")
        again = client.submit(queue, "index", {"n": 2}, delay=timedelta(minutes=10), unique=debounce)
        assert again.id == first.id and again.payload_json() == {"n": 2}
        assert first.next_attempt_at is not None and again.next_attempt_at is not None
        moved = parse_timestamp(again.next_attempt_at) - parse_timestamp(first.next_attempt_at)
        assert moved >= timedelta(minutes=9)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_batch_of_two_items_of_one_key(memory_server: Server, queue: str, transport: str) -> None:
    with memory_server.client(transport) as client:
        unique = rdq.Unique(key="k", hold="until_succeeded")
        results = client.submit_batch(
            [
                rdq.Submit(queue, "h", {"i": 0}, unique=unique),
                rdq.Submit(queue, "h", {"i": 1}, unique=unique),
                rdq.Submit(queue, "h", {"i": 2}),
            ]
        )
        first, second, plain = results
        assert first.ok and first.status == 201 and first.envelope is not None
        assert (second.ok, second.status, second.code) == (False, 409, "UNIQUE_HELD")
        assert second.envelope is None and second.holder == first.envelope.id
        assert second.hold == "until_succeeded"
        err = second.error
        assert isinstance(err, rdq.UniqueHeld) and err.holder == first.envelope.id
        assert plain.status == 201
        assert len(client.list_tasks(queue).items) == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_bad_unique_input_names_the_field(memory_server: Server, queue: str, transport: str) -> None:
    cases = [
        (rdq.Unique(key="k", key_from=["/a"]), "INVALID_ARGUMENT", "unique.key"),
        (rdq.Unique(), "INVALID_ARGUMENT", "unique.key"),
        (rdq.Unique(key="x" * 513), "INVALID_ARGUMENT", "unique.key"),
        (rdq.Unique(key_from=["/missing"]), "INVALID_ARGUMENT", "unique.key_from"),
        (rdq.Unique(key_from=["a"]), "INVALID_ARGUMENT", "unique.key_from"),
        (rdq.Unique(key="k", hold="sometimes"), "INVALID_ARGUMENT", "unique.hold"),  # type: ignore[arg-type]
        (rdq.Unique(key="k", scope="everywhere"), "INVALID_ARGUMENT", "unique.scope"),  # type: ignore[arg-type]
        (rdq.Unique(key="k", on_conflict="merge"), "INVALID_ARGUMENT", "unique.on_conflict"),  # type: ignore[arg-type]
        (rdq.Unique(key="k", hold="for"), "INVALID_ARGUMENT", "unique.hold_ms"),
        (rdq.Unique(key="k", hold_ms=1000), "INVALID_ARGUMENT", "unique.hold_ms"),
        (rdq.Unique(key="k", hold="for", hold_ms=0), "INVALID_ARGUMENT", "unique.hold_ms"),
        # gRPC's uint64 cannot carry it: sent over HTTP, judged there.
        (rdq.Unique(key="k", hold="for", hold_ms=-1), "MALFORMED_REQUEST", None),
    ]
    with memory_server.client(transport) as client:
        for unique, code, field in cases:
            with pytest.raises(rdq.InvalidRequest) as refused:
                client.submit(queue, "h", {"a": 1}, unique=unique)
            err = refused.value
            assert err.status == 400, unique
            if code is not None:
                assert err.code == code, (unique, err)
            assert err.field == field, (unique, err)
        # The same refusals per batch item; the others are stored.
        results = client.submit_batch(
            [rdq.Submit(queue, "h", {"a": 1}, unique=rdq.Unique(key="k", key_from=["/a"])), rdq.Submit(queue, "h")]
        )
        assert (results[0].status, results[0].code) == (400, "INVALID_ARGUMENT")
        assert results[0].problem.get("field") == "unique.key"
        assert isinstance(results[0].error, rdq.InvalidRequest)
        assert results[1].status == 201
        assert len(client.list_tasks(queue).items) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_hold_forever(memory_server: Server, queue: str, transport: str) -> None:
    with memory_server.client(transport) as client:
        first = client.submit(queue, "h", None, unique=rdq.Unique(key="k", hold="forever"))
        assert first.headers["rdq.unique_hold"] == "forever"
        with pytest.raises(rdq.UniqueHeld) as held:
            client.submit(queue, "h", None, unique=rdq.Unique(key="k"))
        assert (held.value.holder, held.value.hold) == (first.id, "forever")


def test_hold_for_takes_a_timedelta(memory_server: Server, queue: str) -> None:
    unique = rdq.Unique(key="k", hold="for", hold_ms=timedelta(hours=1))
    assert unique.to_json() == {"key": "k", "hold": "for", "hold_ms": 3600000}
    with memory_server.client() as client:
        first = client.submit(queue, "h", None, unique=unique)
        assert first.headers["rdq.unique_hold"].startswith("for")
        with pytest.raises(rdq.UniqueHeld) as held:
            client.submit(queue, "h", None, unique=rdq.Unique(key="k"))
        assert held.value.holder == first.id


def test_key_from_must_be_a_list_not_a_string() -> None:
    with pytest.raises(rdq.InvalidRequest) as refused:
        rdq.Client("http://127.0.0.1:9").submit("q", "h", {"a": 1}, unique=rdq.Unique(key_from="/a"))
    assert refused.value.field == "unique.key_from"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_store_without_unique_refuses_it(server: Server, queue: str, transport: str) -> None:
    if _capabilities(server).get("unique"):
        pytest.skip("the embedded store has capability unique now")
    with server.client(transport) as client, pytest.raises(rdq.Unsupported) as refused:
        client.submit(queue, "h", None, unique=rdq.Unique(key="k"))
    assert refused.value.code == "UNSUPPORTED"


def test_status_details_that_are_not_a_status_carry_no_problem() -> None:
    from rdq._grpc import status_problem
    from rdq.v1 import api_pb2

    for junk in (b"", b"\xff", b"\x1a\x05ab", b"\x1a\x02\x0a\xff", b"\x08\x96\x01"):
        assert status_problem(junk) is None
    problem = api_pb2.Problem(code="UNIQUE_HELD", detail="d", http_status=409, extensions_json='{"holder":"x"}')
    url = b"type.googleapis.com/rdq.v1.Problem"
    value = problem.SerializeToString()
    any_msg = b"\x0a" + bytes([len(url)]) + url + b"\x12" + bytes([len(value)]) + value
    status = b"\x08\x0a\x12\x01m" + b"\x1a" + bytes([len(any_msg)]) + any_msg
    assert status_problem(status) == problem
