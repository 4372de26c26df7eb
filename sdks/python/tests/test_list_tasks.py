"""Listing a queue's tasks against a real server: by status, handler and
header, paged with a cursor, walked whole, on both transports; refusals
carry the server's code."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import rdq
from conftest import TOKEN, Server
from rdq import _calls

TRANSPORTS = ["grpc", "http"]


def _no_request(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"an HTTP request was sent: {request.method} {request.url}")


def _newest_first(*envs: rdq.Envelope) -> list[str]:
    return sorted((e.id for e in envs), reverse=True)


def _ids(page: rdq.TaskPage) -> list[str]:
    return [e.id for e in page.items]


def _tasks_in_every_status(client: rdq.Client, queue: str) -> dict[str, list[rdq.Envelope]]:
    """Two SUCCEEDED tasks, one IN_FLIGHT, three PENDING and one DEAD
    (cancelled), of handlers `a` and `b`, with and without a tenant."""
    done_a = client.submit(queue, "a", headers={"tenant": "acme"})
    done_b = client.submit(queue, "b", headers={"tenant": "globex"})
    running = client.submit(queue, "a", headers={"tenant": "acme"})
    leased = client._run(_calls.claim(queue, 3, 60_000))
    assert sorted(t.id for t in leased) == sorted([done_a.id, done_b.id, running.id])
    tokens = {t.id: t.lease_token for t in leased}
    settles = [{"id": e.id, "lease_token": tokens[e.id], "outcome": "SUCCESS"} for e in (done_a, done_b)]
    assert [r.code for r in client._run(_calls.settle_batch(settles, False))] == [None, None]
    pending = [
        client.submit(queue, "a", headers={"tenant": "acme"}),
        client.submit(queue, "b", headers={"tenant": "globex"}),
        client.submit(queue, "b"),
    ]
    cancelled = client.submit(queue, "a", headers={"tenant": "globex"})
    assert client.cancel(queue, ids=[cancelled.id]).ids == [cancelled.id]
    return {
        "SUCCEEDED": [done_a, done_b],
        "IN_FLIGHT": [running],
        "PENDING": pending,
        "DEAD": [cancelled],
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tasks_are_listed_by_status_handler_and_header(server: Server, queue: str, transport: str) -> None:
    with server.client(transport) as client:
        by_status = _tasks_in_every_status(client, queue)
        everything = [e for envs in by_status.values() for e in envs]
        assert _ids(client.list_tasks(queue)) == _newest_first(*everything)
        for status, envs in by_status.items():
            page = client.list_tasks(queue, status=status)
            assert _ids(page) == _newest_first(*envs), status
            assert {e.status for e in page.items} == {status}
            assert page.next_cursor is None
        assert _ids(client.list_tasks(queue, status=rdq.Status.DEAD)) == _newest_first(*by_status["DEAD"])

        done_a, done_b = by_status["SUCCEEDED"]
        (running,) = by_status["IN_FLIGHT"]
        acme, globex, bare = by_status["PENDING"]
        (cancelled,) = by_status["DEAD"]
        assert _ids(client.list_tasks(queue, handler_ref="a")) == _newest_first(done_a, running, acme, cancelled)
        assert _ids(client.list_tasks(queue, header="tenant=acme")) == _newest_first(done_a, running, acme)
        assert _ids(client.list_tasks(queue, header="tenant=globex")) == _newest_first(done_b, globex, cancelled)
        assert _ids(client.list_tasks(queue, status="PENDING", handler_ref="b")) == _newest_first(globex, bare)
        only = client.list_tasks(queue, status="PENDING", handler_ref="b", header="tenant=globex")
        assert _ids(only) == [globex.id]
        assert only.items[0].headers["tenant"] == "globex" and only.items[0].handler_ref == "b"
        assert client.list_tasks(queue, handler_ref="nobody").items == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_paging_walks_every_task_exactly_once(server: Server, queue: str, transport: str) -> None:
    with server.client(transport) as client:
        submitted = [client.submit(queue, "h", {"n": i}) for i in range(7)]
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = client.list_tasks(queue, limit=3, cursor=cursor)
            assert len(page.items) <= 3
            seen += _ids(page)
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == _newest_first(*submitted)
        assert pages >= 3
        assert [e.id for e in client.iter_tasks(queue, page_size=2)] == seen
        assert [e.id for e in client.iter_tasks(queue, status="PENDING")] == seen
        assert list(client.iter_tasks(queue, status="DEAD", page_size=2)) == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_bad_filter_is_refused_with_the_servers_code(server: Server, queue: str, transport: str) -> None:
    with server.client(transport) as client:
        client.submit(queue, "h")
        with pytest.raises(rdq.InvalidRequest) as bad_status:
            client.list_tasks(queue, status="RUNNING")
        assert (bad_status.value.code, bad_status.value.field, bad_status.value.status) == (
            "INVALID_FIELD",
            "status",
            400,
        )
        with pytest.raises(rdq.InvalidRequest) as bad_header:
            client.list_tasks(queue, header="tenant")
        assert (bad_header.value.code, bad_header.value.field) == ("INVALID_FIELD", "header")
        with pytest.raises(rdq.InvalidRequest) as bad_cursor:
            client.list_tasks(queue, cursor="not-a-task-id")
        assert bad_cursor.value.code == "INVALID_ARGUMENT"
        with pytest.raises(rdq.InvalidRequest) as bad_status_walk:
            list(client.iter_tasks(queue, status="RUNNING"))
        assert bad_status_walk.value.code == "INVALID_FIELD"


def test_a_bad_queue_name_is_refused_before_any_request() -> None:
    client = rdq.Client("http://127.0.0.1:9", http_transport=httpx.MockTransport(_no_request))
    with pytest.raises(rdq.InvalidRequest) as refused:
        client.list_tasks("Bad Queue")
    assert (refused.value.code, refused.value.field) == ("INVALID_QUEUE_NAME", "queue")


def test_listing_goes_over_grpc(server: Server, queue: str) -> None:
    """With gRPC (the default), a listing sends no HTTP request at all."""
    with server.client() as twin:
        env = twin.submit(queue, "h", headers={"k": "v"})
    client = rdq.Client(server.url, token=TOKEN, http_transport=httpx.MockTransport(_no_request))
    with client:
        page = client.list_tasks(queue, status="PENDING", handler_ref="h", header="k=v", limit=1)
        assert _ids(page) == [env.id] and page.items[0] == env
        assert [e.id for e in client.iter_tasks(queue, page_size=1)] == [env.id]


def test_the_async_client_lists_and_walks(server: Server, queue: str) -> None:
    async def scenario() -> None:
        async with server.async_client() as client:
            envs = await asyncio.gather(*(client.submit(queue, "h", {"n": i}) for i in range(5)))
            page = await client.list_tasks(queue, limit=2)
            assert _ids(page) == _newest_first(*envs)[:2] and page.next_cursor is not None
            assert [e.id async for e in client.iter_tasks(queue, page_size=2)] == _newest_first(*envs)
            with pytest.raises(rdq.InvalidRequest) as refused:
                await client.list_tasks(queue, status="RUNNING")
            assert refused.value.code == "INVALID_FIELD"

    asyncio.run(scenario())
