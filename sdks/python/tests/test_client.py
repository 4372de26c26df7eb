"""The client against a real server: submit with every option, reads,
the DLQ, queue configuration, and refusals carrying their stable codes."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest

import rdq
from conftest import TOKEN, Server, kill_by_hand
from rdq.envelope import parse_timestamp


@dataclasses.dataclass
class Order:
    order_id: int
    amount: str


def _no_request(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"a request was sent: {request.method} {request.url}")


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_submit_sends_every_option(server: Server, queue: str, transport: str) -> None:
    with server.client(transport) as client:
        env = client.submit(
            queue,
            "charge-payment",
            Order(42, "9.99"),
            delay=60,
            priority=7,
            idempotency_key="order-42",
            flow_key="acme",
            headers={"tenant": "acme"},
            handler_version="v3",
        )
        assert env.status == "PENDING"
        assert env.payload_json() == {"order_id": 42, "amount": "9.99"}
        assert env.payload_content_type == "application/json"
        assert (env.priority, env.handler_version, env.flow_key) == (7, "v3", "acme")
        assert env.headers["tenant"] == "acme" and env.headers["rdq.submitted_by"] == "py"
        assert env.next_attempt_at is not None
        delay = parse_timestamp(env.next_attempt_at) - parse_timestamp(env.created_at)
        assert delay.total_seconds() == 60
        again = client.submit(queue, "charge-payment", Order(42, "9.99"), idempotency_key="order-42")
        assert again.id == env.id
        assert client.get(env.id) == env


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_submit_bytes_is_an_opaque_payload(server: Server, queue: str, transport: str) -> None:
    with server.client(transport) as client:
        env = client.submit(queue, "h", b"\x00\xffraw", content_type="application/x-thing")
        assert (env.payload, env.payload_content_type) == (b"\x00\xffraw", "application/x-thing")


def test_reserved_headers_and_bad_names_are_refused_before_any_request() -> None:
    client = rdq.Client("http://127.0.0.1:9", http_transport=httpx.MockTransport(_no_request))
    cases = [
        (
            dict(queue="q", handler="h", headers={"Rdq.submitted_by": "me"}),
            "RESERVED_HEADER",
            "headers.Rdq.submitted_by",
        ),
        (dict(queue="Bad Queue", handler="h"), "INVALID_QUEUE_NAME", "queue"),
        (dict(queue="q", handler=".."), "INVALID_HANDLER_REF", "handler_ref"),
        (dict(queue="q", handler="h", flow_key="no spaces"), "INVALID_FIELD", "flow_key"),
        (dict(queue="q", handler="h", delay=-1), "INVALID_FIELD", "delay_ms"),
        (dict(queue="q", handler="h", payload={1, 2}), "MALFORMED_REQUEST", None),
        (dict(queue="q", handler="h", payload=float("nan")), "MALFORMED_REQUEST", None),
    ]
    for kwargs, code, field in cases:
        with pytest.raises(rdq.InvalidRequest) as refused:
            client.submit(**kwargs)  # type: ignore[arg-type]
        assert (refused.value.code, refused.value.field) == (code, field)
    with pytest.raises(rdq.InvalidRequest):
        client.submit_batch([rdq.Submit("q", "h"), rdq.Submit("q", "h", headers={"rdq.x": "1"})])


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_refusals_carry_the_servers_code(server: Server, queue: str, transport: str) -> None:
    with server.client(transport) as client:
        with pytest.raises(rdq.NotFound) as missing:
            client.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
        assert (missing.value.code, missing.value.status) == ("TASK_NOT_FOUND", 404)
        with pytest.raises(rdq.InvalidRequest) as bad_id:
            client.get("not-an-id")
        assert bad_id.value.code == "INVALID_ARGUMENT"
        with pytest.raises(rdq.InvalidRequest) as too_high:
            client.submit(queue, "h", priority=300)
        assert too_high.value.code in ("MALFORMED_REQUEST", "INVALID_FIELD")
        with pytest.raises(rdq.NotFound) as no_queue:
            client.queue_config("never-used-" + queue)
        assert no_queue.value.code == "QUEUE_NOT_FOUND"
        with pytest.raises(rdq.InvalidRequest) as bad_policy:
            client.set_queue_config(queue, {"max_attempts": "many"})
        assert bad_policy.value.code == "INVALID_POLICY"
    stranger = rdq.Client(server.url, token="wrong", transport=transport)  # type: ignore[arg-type]
    with stranger, pytest.raises(rdq.Unauthenticated) as denied:
        stranger.submit(queue, "h")
    assert denied.value.code == "UNAUTHENTICATED"


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_server_that_is_not_there_is_unavailable(transport: str) -> None:
    client = rdq.Client("http://127.0.0.1:9", timeout=2, transport=transport)  # type: ignore[arg-type]
    with client, pytest.raises(rdq.Unavailable) as down:
        client.get("01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
    # gRPC calls wait for a connection until their timeout; HTTP is refused at once.
    assert down.value.code == {"grpc": "TIMEOUT", "http": "CONNECTION_FAILED"}[transport]


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_batch_submit_answers_each_item(server: Server, queue: str, transport: str) -> None:
    with server.client(transport) as client:
        results = client.submit_batch(
            [
                rdq.Submit(queue, "h", {"n": 1}, idempotency_key="k1"),
                rdq.Submit(queue, "h", {"n": 2}, priority=300),
                rdq.Submit(queue, "h", {"n": 1}, idempotency_key="k1"),
            ]
        )
        assert [r.status for r in results] == [201, 400, 200]
        assert results[0].ok and not results[1].ok and results[1].code is not None
        assert results[0].envelope is not None and results[2].envelope is not None
        assert results[2].envelope.id == results[0].envelope.id


def test_queue_config_and_counts(server: Server, queue: str) -> None:
    with server.client() as client:
        client.submit(queue, "h")
        policy = client.set_queue_config(queue, {"max_attempts": 7, "retryable_errors": ["net.*"]})
        assert policy["max_attempts"] == 7
        assert client.queue_config(queue)["retryable_errors"] == ["net.*"]
        (counts,) = client.queues([queue])
        assert (counts.queue, counts.pending, counts.dead) == (queue, 1, 0)


def test_the_dlq_can_be_listed_shown_exported_redriven_and_purged(server: Server, queue: str) -> None:
    with server.client() as client:
        first = kill_by_hand(client, queue, "app.Broken")
        second = kill_by_hand(client, queue, "app.Other")
        page = client.dlq_list(queue, limit=1)
        assert [e.id for e in page.items] == [second.id] and page.next_cursor is not None
        rest = client.dlq_list(queue, cursor=page.next_cursor)
        assert [e.id for e in rest.items] == [first.id]
        assert [e.id for e in client.dlq_list(queue, error_type="app.B*").items] == [first.id]
        shown = client.dlq_show(queue, first.id)
        assert shown.last_error is not None and shown.last_error.type == "app.Broken"
        exported = list(client.dlq_export(queue))
        assert [rdq.envelope.encode(e) for e in exported] == [rdq.envelope.encode(first), rdq.envelope.encode(second)]
        dry = client.dlq_redrive(queue, ids=[first.id], dry_run=True)
        assert (dry.count, dry.dry_run) == (1, True)
        done = client.dlq_redrive(queue, ids=[first.id])
        assert done.ids == [first.id]
        redriven = client.get(first.id)
        assert (redriven.status, redriven.redrive_count, len(redriven.attempts)) == ("PENDING", 1, 1)
        assert client.dlq_purge(queue, dry_run=True) == 1
        assert client.dlq_purge(queue) == 1
        assert client.dlq_list(queue).items == []
        with pytest.raises(rdq.NotFound):
            client.dlq_show(queue, second.id)


def test_the_async_client_is_the_same_api(server: Server, queue: str) -> None:
    async def scenario() -> None:
        async with rdq.AsyncClient(server.url, token=TOKEN) as client:
            envs = await asyncio.gather(*(client.submit(queue, "h", {"n": i}) for i in range(20)))
            assert len({e.id for e in envs}) == 20
            got = await client.get(envs[0].id)
            assert got == envs[0]
            with pytest.raises(rdq.InvalidRequest) as refused:
                await client.submit(queue, "h", headers={"rdq.flow_key": "x"})
            assert refused.value.code == "RESERVED_HEADER"
            dlq = queue + "-dlq"
            with server.client() as twin:
                dead = kill_by_hand(twin, dlq)
            assert [e.id async for e in client.dlq_export(dlq)] == [dead.id]
            assert [e.id for e in (await client.dlq_list(dlq)).items] == [dead.id]
            assert (await client.dlq_redrive(dlq)).ids == [dead.id]
            assert await client.dlq_purge(dlq) == 0

    asyncio.run(scenario())
