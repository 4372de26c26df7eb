"""Sources: the answers of /v1/sources and of the gRPC `Sources` service
read from canned documents, refusals, and a real `rdq serve --config` with
two `[[sources]]` tables whose servers cannot be reached (a NATS JetStream
stream and an SQS queue), on both transports."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

import rdq
from conftest import POSTGRES_URL, Server, _store_url, start_server, stop_server
from rdq import _calls
from rdq.v1 import api_pb2

TRANSPORTS = ["grpc", "http"]

# The example of docs/sources.md ("Status"), with members this SDK does not know, at every level.
DOCUMENTED = {
    "name": "orders",
    "kind": "kafka",
    "queue": "orders",
    "state": "retrying",
    "paused": False,
    "lag": 12,
    "ingested": 48210,
    "dead": 1,
    "duplicates": 3,
    "rate": 812.4,
    "last_error": "source orders: the topic orders does not exist on kafka-1:9092",
    "last_error_at_ms": 1767225600123,
    "cursors_in_store": True,
    "partitions": [
        {"partition": "0", "cursor": 16070, "lag": 4, "leader": 3},
        {"partition": "1", "cursor": None, "lag": None},
    ],
    "future_field": {"a": [1, 2]},
}
DOCUMENTED_STATUS = rdq.SourceStatus(
    name="orders",
    kind=rdq.SourceKind.KAFKA,
    queue="orders",
    state=rdq.SourceState.RETRYING,
    paused=False,
    lag=12,
    ingested=48210,
    dead=1,
    duplicates=3,
    rate=812.4,
    last_error="source orders: the topic orders does not exist on kafka-1:9092",
    last_error_at=datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC),
    cursors_in_store=True,
    partitions=[rdq.SourcePartition("0", 16070, 4), rdq.SourcePartition("1", None, None)],
)
# A source nothing is measured of yet.
FRESH = {
    "name": "inv.sqs",
    "kind": "sqs",
    "queue": "invoices",
    "state": "starting",
    "paused": False,
    "lag": None,
    "ingested": 0,
    "dead": 0,
    "duplicates": 0,
    "rate": 0.0,
    "last_error": None,
    "last_error_at_ms": None,
    "cursors_in_store": False,
    "partitions": [],
}
FRESH_STATUS = rdq.SourceStatus(
    name="inv.sqs",
    kind=rdq.SourceKind.SQS,
    queue="invoices",
    state=rdq.SourceState.STARTING,
    paused=False,
    lag=None,
    ingested=0,
    dead=0,
    duplicates=0,
    rate=0.0,
    last_error=None,
    last_error_at=None,
    cursors_in_store=False,
    partitions=[],
)
NOT_FOUND = {
    "code": "SOURCE_NOT_FOUND",
    "detail": 'no source "nope" runs in this server',
    "status": 404,
    "title": "Source not found",
    "type": "urn:rdq:error:SOURCE_NOT_FOUND",
}


def _canned(seen: list[str]) -> Callable[[httpx.Request], httpx.Response]:
    answers: dict[str, object] = {
        "GET /v1/sources": {"sources": [FRESH, DOCUMENTED], "next": "ignored"},
        "GET /v1/sources/orders": DOCUMENTED,
        "DELETE /v1/sources/orders/cursors": {"name": "orders", "deleted": 6, "by": "ignored"},
    }

    def answer(request: httpx.Request) -> httpx.Response:
        key = f"{request.method} {request.url.raw_path.decode()}"
        seen.append(key)
        assert request.content == b""
        if key in answers:
            return httpx.Response(200, json=answers[key])
        return httpx.Response(404, json=NOT_FOUND, headers={"content-type": "application/problem+json"})

    return answer


def test_the_calls_read_the_servers_json() -> None:
    seen: list[str] = []
    with rdq.Client("http://127.0.0.1:9", transport="http", http_transport=httpx.MockTransport(_canned(seen))) as c:
        assert c.list_sources() == [FRESH_STATUS, DOCUMENTED_STATUS]
        got = c.get_source("orders")
        assert got == DOCUMENTED_STATUS
        assert got.kind == "kafka" and got.state == "retrying"  # the enums are their JSON strings
        assert c.reset_source_cursors("orders") == 6
        with pytest.raises(rdq.NotFound) as missing:
            c.get_source("nope")
        assert (missing.value.code, missing.value.status) == ("SOURCE_NOT_FOUND", 404)
        assert missing.value.detail == 'no source "nope" runs in this server'
        with pytest.raises(rdq.NotFound) as missing:
            c.reset_source_cursors("nope")
        assert missing.value.code == "SOURCE_NOT_FOUND"
    assert seen == [
        "GET /v1/sources",
        "GET /v1/sources/orders",
        "DELETE /v1/sources/orders/cursors",
        "GET /v1/sources/nope",
        "DELETE /v1/sources/nope/cursors",
    ]


def test_the_async_calls_read_the_servers_json() -> None:
    seen: list[str] = []

    async def main() -> None:
        transport = httpx.MockTransport(_canned(seen))
        async with rdq.AsyncClient("http://127.0.0.1:9", transport="http", http_transport=transport) as c:
            assert await c.list_sources() == [FRESH_STATUS, DOCUMENTED_STATUS]
            assert await c.get_source("orders") == DOCUMENTED_STATUS
            assert await c.reset_source_cursors("orders") == 6
            with pytest.raises(rdq.NotFound) as missing:
                await c.get_source("nope")
            assert missing.value.code == "SOURCE_NOT_FOUND"

    asyncio.run(main())
    assert len(seen) == 4


def test_a_grpc_answer_reads_as_its_json_twin() -> None:
    msg = api_pb2.SourceResponse(
        name="orders",
        kind="kafka",
        queue="orders",
        state="retrying",
        lag=12,
        ingested=48210,
        dead=1,
        duplicates=3,
        rate=812.4,
        last_error="source orders: the topic orders does not exist on kafka-1:9092",
        last_error_at_ms=1767225600123,
        cursors_in_store=True,
        partitions=[
            api_pb2.SourcePartition(partition="0", cursor=16070, lag=4),
            api_pb2.SourcePartition(partition="1"),
        ],
    )
    assert _calls.get_source("orders").rpc is not None
    assert _calls._source_of(msg) == DOCUMENTED_STATUS
    fresh = api_pb2.SourceResponse(name="inv.sqs", kind="sqs", queue="invoices", state="starting")
    assert _calls._source_of(fresh) == FRESH_STATUS
    listed = api_pb2.ListSourcesResponse(sources=[fresh, msg])
    assert _calls.list_sources().rpc is not None
    assert _calls._read_sources_proto(listed) == [FRESH_STATUS, DOCUMENTED_STATUS]
    assert _calls._read_reset_proto(api_pb2.ResetSourceCursorsResponse(name="orders", deleted=6)) == 6


def test_a_newer_servers_kind_or_state_stays_a_string() -> None:
    status = rdq.SourceStatus.from_json({**FRESH, "kind": "pubsub", "state": "draining"})
    assert (status.kind, status.state) == ("pubsub", "draining")
    assert not isinstance(status.kind, rdq.SourceKind)


@pytest.mark.parametrize(
    "spoil",
    [
        {"name": None},
        {"kind": 3},
        {"lag": "many"},
        {"lag": True},
        {"rate": "fast"},
        {"paused": "no"},
        {"partitions": [1]},
        {"partitions": {"0": {}}},
        {"last_error_at_ms": 1.5},
    ],
)
def test_an_answer_this_sdk_cannot_read_is_a_server_error(spoil: dict[str, object]) -> None:
    with pytest.raises(rdq.ServerError) as bad:
        rdq.SourceStatus.from_json({**FRESH, **spoil})
    assert bad.value.code == "INTERNAL"


def _no_request(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"an HTTP request was sent: {request.method} {request.url}")


@pytest.mark.parametrize("name", ["", ".", "..", "Orders", "a/b", "a b", "é", "a" * 121])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_bad_name_is_refused_before_any_request(name: str, transport: str) -> None:
    # gRPC has nowhere to go: port 9 answers nothing.
    offline = httpx.MockTransport(_no_request)
    with rdq.Client("http://127.0.0.1:9", timeout=1, transport=transport, http_transport=offline) as c:  # type: ignore[arg-type]
        for call in (c.get_source, c.reset_source_cursors):
            with pytest.raises(rdq.InvalidRequest) as refused:
                call(name)
            assert (refused.value.code, refused.value.field) == ("INVALID_ARGUMENT", "source")


def test_names_the_server_takes_are_sent() -> None:
    seen: list[str] = []
    with rdq.Client("http://127.0.0.1:9", transport="http", http_transport=httpx.MockTransport(_canned(seen))) as c:
        for name in [".x", "..x", "a.b_c-1", "a" * 120]:
            with pytest.raises(rdq.NotFound):
                c.get_source(name)
    assert len(seen) == 4


# -- against a real server -----------------------------------------------------


def _config(nats_name: str, sqs_name: str, queue: str) -> str:
    return f"""
[[sources]]
name = {json.dumps(nats_name)}
queue = {json.dumps(queue)}
handler = "audit.record"
retry_ms = 100

[sources.nats]
url = "nats://127.0.0.1:1"
stream = "AUDIT"

[[sources]]
name = {json.dumps(sqs_name)}
queue = {json.dumps(queue)}
handler = "invoice.issue"

[sources.sqs]
queue_url = "http://127.0.0.1:1/000000000000/invoices"
endpoint = "http://127.0.0.1:1"
access_key_id = "test"
secret_access_key = "test"
"""


class SourcesServer:
    def __init__(self, server: Server, nats_name: str, sqs_name: str, queue: str) -> None:
        self.server, self.nats_name, self.sqs_name, self.queue = server, nats_name, sqs_name, queue


@pytest.fixture(scope="module", params=["embedded", "postgres"])
def sources_server(request: pytest.FixtureRequest) -> Iterator[SourcesServer]:
    """A server running two sources that cannot connect, on each store that keeps cursors."""
    store, schema = _store_url(request.param)
    suffix = uuid.uuid4().hex[:8]
    s = SourcesServer(
        start_server(store, config=_config("audit." + suffix, "invoices." + suffix, "sources-" + suffix)),
        "audit." + suffix,
        "invoices." + suffix,
        "sources-" + suffix,
    )
    yield s
    stop_server(s.server)
    if schema and shutil.which("psql"):
        subprocess.run(
            ["psql", POSTGRES_URL, "-q", "-c", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
            capture_output=True, check=False,
        )  # fmt: skip


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_sources_of_a_running_server(sources_server: SourcesServer, transport: str) -> None:
    s = sources_server
    with s.server.client(transport) as client:
        listed = client.list_sources()
        assert [(x.name, x.kind, x.queue) for x in listed] == [
            (s.nats_name, rdq.SourceKind.NATS, s.queue),
            (s.sqs_name, rdq.SourceKind.SQS, s.queue),
        ]  # by name: audit…, invoices…
        for x in listed:
            assert isinstance(x.state, rdq.SourceState) and not x.paused and x.lag is None
            assert (x.ingested, x.dead, x.duplicates, x.rate) == (0, 0, 0, 0.0)
        assert not listed[1].cursors_in_store  # SQS keeps no cursor on any store

        # The NATS source cannot connect: it shows its error and tries again.
        before = datetime.now(UTC) - timedelta(minutes=1)
        deadline = time.monotonic() + 60
        while True:
            nats = client.get_source(s.nats_name)
            if nats.last_error is not None:
                break
            assert time.monotonic() < deadline, f"the NATS source never showed an error: {nats}"
            time.sleep(0.05)
        assert (nats.name, nats.kind, nats.queue) == (s.nats_name, rdq.SourceKind.NATS, s.queue)
        assert nats.state in (rdq.SourceState.RETRYING, rdq.SourceState.STARTING)
        assert s.nats_name in nats.last_error
        assert nats.last_error_at is not None and before < nats.last_error_at < datetime.now(UTC) + timedelta(minutes=1)
        sqs = client.get_source(s.sqs_name)
        assert (sqs.name, sqs.kind, sqs.queue) == (s.sqs_name, rdq.SourceKind.SQS, s.queue)

        with pytest.raises(rdq.NotFound) as missing:
            client.get_source("no-such-source")
        assert (missing.value.code, missing.value.status) == ("SOURCE_NOT_FOUND", 404)

        # These stores keep cursors; these sources have none yet. A source
        # the server does not run can be reset too.
        for name in (s.nats_name, s.sqs_name, "no-such-source"):
            assert client.reset_source_cursors(name) == 0
        assert client.get_source(s.nats_name).name == s.nats_name


def test_the_async_client_reads_a_running_servers_sources(sources_server: SourcesServer) -> None:
    s = sources_server

    async def main() -> None:
        async with s.server.async_client() as client:
            assert [x.name for x in await client.list_sources()] == [s.nats_name, s.sqs_name]
            assert (await client.get_source(s.sqs_name)).kind == rdq.SourceKind.SQS
            with pytest.raises(rdq.NotFound):
                await client.get_source("no-such-source")
            assert await client.reset_source_cursors(s.sqs_name) == 0

    asyncio.run(main())
