"""Schedules against a real server, on both transports: put, read, list,
preview, pause, resume, run once and delete; refusals with the rule's code;
and a worker declaring schedules in code: stored with owner `code`, fired
by the server, those declared no more reported and kept."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from datetime import UTC, datetime, timedelta
from typing import Literal

import httpx
import pytest

import rdq
from conftest import TOKEN, Server

TRANSPORTS = ["grpc", "http"]
Transport = Literal["grpc", "http"]
NEVER_SOON = "0 0 1 1 *"  # once a year, on 1 January at midnight


def _no_request(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"an HTTP request was sent: {request.method} {request.url}")


def _offline() -> rdq.Client:
    """A client any request of which fails the test (gRPC has nowhere to go)."""
    return rdq.Client("http://127.0.0.1:9", timeout=1, http_transport=httpx.MockTransport(_no_request))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_schedule_round_trips(server: Server, queue: str, transport: str) -> None:
    name = queue + ".hourly"
    task = rdq.ScheduleTask(
        queue,
        "build-report",
        payload=b'{"days":1}',
        payload_content_type="application/json",
        headers={"team": "data"},
        priority=5,
        flow_key="tenant-42",
    )
    schedule = rdq.Schedule.of_every(name, timedelta(hours=1), task)
    with server.client(transport) as client:
        state, created = client.put_schedule(schedule)
        assert created and (state.name, state.owner) == (name, "api")
        # Read back with the server's defaults written out.
        assert state.schedule == dataclasses.replace(
            schedule, tz="UTC", overlap=rdq.Overlap.ALLOW, catch_up=rdq.CatchUp.latest()
        )
        assert state.fires == 0 and state.next_due is not None

        again, created = client.put_schedule(schedule)
        assert not created and again.created_at == state.created_at and again.schedule == state.schedule
        got = client.get_schedule(name)
        assert (got.name, got.owner, got.schedule) == (name, "api", state.schedule)
        assert name in [s.name for s in client.list_schedules()]

        due = client.next_due(name, 3)
        assert len(due) == 3 and due[0] > datetime.now(UTC) - timedelta(seconds=5)
        assert [b - a for a, b in itertools.pairwise(due)] == [timedelta(hours=1)] * 2
        assert all(d.tzinfo is not None and d.timestamp() % 3600 == 0 for d in due)  # anchored at the epoch
        assert len(client.next_due(name)) == 5

        paused = client.pause_schedule(name)
        assert paused.schedule.paused and client.get_schedule(name).schedule.paused
        resumed = client.resume_schedule(name)
        assert not resumed.schedule.paused

        env = client.run_schedule(name)
        assert (env.queue, env.handler_ref, env.payload, env.priority) == (queue, "build-report", b'{"days":1}', 5)
        assert env.payload_content_type == "application/json" and env.flow_key == "tenant-42"
        assert env.headers["rdq.schedule"] == name and env.headers["rdq.schedule_manual"] == "true"
        assert env.headers["team"] == "data" and "rdq.schedule_due" not in env.headers
        assert client.get(env.id).id == env.id
        assert client.get_schedule(name).fires == 0  # a run by hand moves no counter

        client.delete_schedule(name)
        with pytest.raises(rdq.NotFound) as gone:
            client.get_schedule(name)
        assert (gone.value.code, gone.value.status) == ("SCHEDULE_NOT_FOUND", 404)
        assert name not in [s.name for s in client.list_schedules()]
        assert client.get(env.id).id == env.id  # the tasks it submitted stay


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_field_is_stored_as_given(server: Server, queue: str, transport: str) -> None:
    name = queue + ".nightly"
    schedule = rdq.Schedule.of_cron(
        name,
        "30 2 * * *",
        rdq.ScheduleTask(queue, "nightly", payload_content_type="application/octet-stream"),
        tz="Europe/London",
        start=datetime(2030, 1, 1, tzinfo=UTC),
        end=datetime(2031, 1, 1, tzinfo=UTC),
        paused=True,
        overlap=rdq.Overlap.SKIP_IF_UNFINISHED,
        catch_up=rdq.CatchUp.all(10, timedelta(hours=1)),
    )
    with server.client(transport) as client:
        state, created = client.put_schedule(schedule)
        assert created and state.schedule == schedule
        assert state.next_due == datetime(2030, 1, 1, 2, 30, tzinfo=UTC)  # London is on UTC in January
        assert client.next_due(name, 2) == [
            datetime(2030, 1, 1, 2, 30, tzinfo=UTC),
            datetime(2030, 1, 2, 2, 30, tzinfo=UTC),
        ]
        # Milliseconds and the wire's spellings are the same schedule.
        by_ms = dataclasses.replace(
            schedule,
            start=1_893_456_000_000,
            end=1_924_992_000_000,
            overlap="skip_if_unfinished",
            catch_up=rdq.CatchUp("all", 10, 3_600_000),
        )
        replaced, created = client.put_schedule(by_ms)
        assert not created and replaced.schedule == schedule
        client.delete_schedule(name)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_schedule_that_breaks_a_rule_is_refused_and_nothing_is_stored(
    server: Server, queue: str, transport: str
) -> None:
    task = rdq.ScheduleTask(queue, "h")
    with server.client(transport) as client:
        cases = [
            (rdq.Schedule.of_cron(queue + ".bad-cron", "61 * * * *", task), "INVALID_CRON", "spec.cron"),
            (
                rdq.Schedule.of_cron(queue + ".bad-tz", "0 * * * *", task, tz="Mars/Olympus_Mons"),
                "UNKNOWN_TIME_ZONE",
                "tz",
            ),
            (
                rdq.Schedule.of_every(queue + ".too-long", timedelta(days=400), task),
                "INVALID_INTERVAL",
                "spec.every_ms",
            ),
        ]
        for schedule, code, field in cases:
            with pytest.raises(rdq.InvalidRequest) as refused:
                client.put_schedule(schedule)
            assert (refused.value.code, refused.value.status) == (code, 400), schedule
            if transport == "http":  # gRPC statuses carry the code, not the field
                assert refused.value.field == field
            with pytest.raises(rdq.NotFound) as missing:
                client.get_schedule(schedule.name)
            assert missing.value.code == "SCHEDULE_NOT_FOUND"

        name = queue + ".ok"
        client.put_schedule(rdq.Schedule.of_cron(name, NEVER_SOON, task))
        with pytest.raises(rdq.InvalidRequest) as bad_owner:
            client.put_schedule(rdq.Schedule.of_cron(name, NEVER_SOON, task), owner="robot")  # type: ignore[arg-type]
        assert bad_owner.value.code == "INVALID_FIELD"
        for count in (0, 101):
            with pytest.raises(rdq.InvalidRequest) as bad_count:
                client.next_due(name, count)
            assert bad_count.value.code == "INVALID_FIELD"
        for call in (client.pause_schedule, client.resume_schedule, client.run_schedule, client.delete_schedule):
            with pytest.raises(rdq.NotFound) as unknown:
                call(queue + ".never-put")
            assert unknown.value.code == "SCHEDULE_NOT_FOUND"
        client.delete_schedule(name)


def test_what_has_no_json_form_or_breaks_a_local_rule_is_refused_before_any_request() -> None:
    task = rdq.ScheduleTask("reports", "h")
    cases = [
        (rdq.Schedule.of_cron("Bad Name", NEVER_SOON, task), "INVALID_SCHEDULE_NAME", "name"),
        (rdq.Schedule.of_cron("..", NEVER_SOON, task), "INVALID_SCHEDULE_NAME", "name"),
        (
            rdq.Schedule.of_cron("s", NEVER_SOON, rdq.ScheduleTask("reports", "h", headers={"Rdq.x": "1"})),
            "RESERVED_HEADER",
            "task.headers.Rdq.x",
        ),
        (rdq.Schedule.of_cron("s", NEVER_SOON, rdq.ScheduleTask("Reports", "h")), "INVALID_QUEUE_NAME", "task.queue"),
        (
            rdq.Schedule.of_cron("s", NEVER_SOON, rdq.ScheduleTask("reports", "..")),
            "INVALID_HANDLER_REF",
            "task.handler_ref",
        ),
        (
            rdq.Schedule.of_cron("s", NEVER_SOON, rdq.ScheduleTask("reports", "h", flow_key="no spaces")),
            "INVALID_FIELD",
            "task.flow_key",
        ),
        (rdq.Schedule("s", task), "INVALID_FIELD", "spec"),
        (rdq.Schedule("s", task, cron=NEVER_SOON, every=1000), "INVALID_FIELD", "spec"),
        (rdq.Schedule.of_every("s", timedelta(microseconds=1500), task), "INVALID_INTERVAL", "spec.every_ms"),
        (rdq.Schedule.of_every("s", 0, task), "INVALID_INTERVAL", "spec.every_ms"),
        (
            rdq.Schedule.of_every("s", 1000, task, catch_up=rdq.CatchUp.all(0, 1000)),
            "INVALID_WINDOW",
            "catch_up.all.max",
        ),
        (
            rdq.Schedule.of_every("s", 1000, task, catch_up=rdq.CatchUp.all(3, timedelta(0))),
            "INVALID_WINDOW",
            "catch_up.all.window_ms",
        ),
        (rdq.Schedule.of_every("s", 1000, task, catch_up=rdq.CatchUp("latest", 3)), "INVALID_FIELD", "catch_up"),
        (rdq.Schedule.of_every("s", 1000, task, catch_up=rdq.CatchUp("sometimes")), "INVALID_FIELD", "catch_up"),
        (rdq.Schedule.of_every("s", 1000, task, start=datetime(2030, 1, 1)), "INVALID_FIELD", "start_ms"),
    ]
    with _offline() as client:
        for schedule, code, field in cases:
            with pytest.raises(rdq.InvalidRequest) as refused:
                client.put_schedule(schedule)
            assert (refused.value.code, refused.value.field) == (code, field), schedule
        for call in (client.get_schedule, client.pause_schedule, client.delete_schedule, client.run_schedule):
            with pytest.raises(rdq.InvalidRequest) as bad_name:
                call("No Such Name")
            assert bad_name.value.code == "INVALID_SCHEDULE_NAME"


def test_a_worker_refuses_bad_declarations_when_made() -> None:
    task = rdq.ScheduleTask("reports", "h")
    client = rdq.AsyncClient("http://127.0.0.1:9", http_transport=httpx.MockTransport(_no_request))
    twice = [rdq.Schedule.of_cron("a", NEVER_SOON, task), rdq.Schedule.of_every("a", 1000, task)]
    with pytest.raises(rdq.InvalidRequest) as duplicate:
        rdq.Worker(client, queues=["reports"], schedules=twice)
    assert (duplicate.value.code, duplicate.value.field) == ("INVALID_ARGUMENT", "schedules")
    with pytest.raises(rdq.InvalidRequest) as bad_name:
        rdq.Worker(client, queues=["reports"], schedules=[rdq.Schedule.of_cron("A", NEVER_SOON, task)])
    assert bad_name.value.code == "INVALID_SCHEDULE_NAME"
    assert rdq.Worker(client, queues=["reports"]).undeclared_schedules is None


def test_the_async_client_manages_schedules_over_grpc(server: Server, queue: str) -> None:
    """With gRPC (the default), schedule calls send no HTTP request."""
    name = queue + ".grpc"

    async def scenario() -> None:
        client = rdq.AsyncClient(server.url, token=TOKEN, http_transport=httpx.MockTransport(_no_request))
        async with client:
            state, created = await client.put_schedule(
                rdq.Schedule.of_every(name, 60_000, rdq.ScheduleTask(queue, "h")), owner="code"
            )
            assert created and state.owner == "code" and state.schedule.every == timedelta(minutes=1)
            assert (await client.get_schedule(name)).owner == "code"
            assert name in [s.name for s in await client.list_schedules()]
            assert len(await client.next_due(name, 2)) == 2
            assert (await client.pause_schedule(name)).schedule.paused
            assert not (await client.resume_schedule(name)).schedule.paused
            env = await client.run_schedule(name)
            assert env.headers["rdq.schedule"] == name
            # A put through the API makes it the API's again.
            state, created = await client.put_schedule(state.schedule)
            assert not created and state.owner == "api"
            await client.delete_schedule(name)
            with pytest.raises(rdq.NotFound):
                await client.get_schedule(name)

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_declared_schedule_fires_and_one_declared_no_more_is_reported_not_deleted(
    server: Server, queue: str, transport: Transport, caplog: pytest.LogCaptureFixture
) -> None:
    ticking, by_hand, nightly = queue + ".tick", queue + ".by-hand", queue + ".nightly"

    async def scenario() -> None:
        async with server.async_client(transport) as client:
            # An api-owned schedule is never reported, declared or not.
            await client.put_schedule(rdq.Schedule.of_cron(by_hand, NEVER_SOON, rdq.ScheduleTask(queue, "tick")))
            ticks: asyncio.Queue[tuple[dict[str, str], bytes]] = asyncio.Queue()
            every_second = rdq.Schedule.of_every(
                ticking, timedelta(seconds=1), rdq.ScheduleTask(queue, "tick", payload=b"t")
            )
            first = rdq.Worker(
                client, queues=[queue], transport=transport, poll_interval=0.05, schedules=[every_second]
            )

            @first.handler("tick")
            async def tick(ctx: rdq.TaskContext) -> None:
                ticks.put_nowait((dict(ctx.headers), ctx.payload))

            assert first.undeclared_schedules is None
            running = asyncio.create_task(first.run(handle_signals=False))
            try:
                # The server's scheduler fires it; the worker runs the task.
                headers, payload = await asyncio.wait_for(ticks.get(), 30)
                assert headers["rdq.schedule"] == ticking and headers.get("rdq.schedule_due")
                assert "rdq.schedule_manual" not in headers and payload == b"t"
                undeclared = first.undeclared_schedules
                assert undeclared is not None and [n for n in undeclared if n.startswith(queue)] == []
                stored = await client.get_schedule(ticking)
                assert stored.owner == "code" and stored.schedule.every == timedelta(seconds=1)
            finally:
                first.stop()
                await running

            # The next deploy declares another set: the first schedule is
            # reported, kept, and still owned by code; the api one is not.
            other = rdq.Schedule.of_cron(nightly, "30 2 * * *", rdq.ScheduleTask(queue, "tick"), tz="Asia/Tokyo")
            second = rdq.Worker(client, queues=[queue], transport=transport, schedules=[other])
            second.handler("tick")(lambda: None)
            with caplog.at_level(logging.WARNING, logger="rdq.worker"):
                running = asyncio.create_task(second.run(handle_signals=False))
                try:
                    while second.undeclared_schedules is None:
                        assert not running.done(), running
                        await asyncio.sleep(0.01)
                finally:
                    second.stop()
                    await running
            undeclared = second.undeclared_schedules
            assert undeclared is not None and ticking in undeclared and by_hand not in undeclared
            assert nightly not in undeclared
            assert f"rdq schedule delete {ticking}" in caplog.text
            assert f"rdq schedule delete {by_hand}" not in caplog.text
            assert (await client.get_schedule(ticking)).owner == "code"
            declared = await client.get_schedule(nightly)
            assert (declared.owner, declared.schedule.tz) == ("code", "Asia/Tokyo")
            assert declared.schedule.cron == "30 2 * * *"
            assert (await client.get_schedule(by_hand)).owner == "api"
            for name in (ticking, by_hand, nightly):
                await client.delete_schedule(name)

    asyncio.run(asyncio.wait_for(scenario(), 120))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_worker_declaring_an_invalid_schedule_fails_to_start(
    server: Server, queue: str, transport: Transport
) -> None:
    good = rdq.Schedule.of_cron(queue + ".good", NEVER_SOON, rdq.ScheduleTask(queue, "h"))
    bad = rdq.Schedule.of_cron(queue + ".bad", "61 * * * *", rdq.ScheduleTask(queue, "h"))

    async def scenario() -> None:
        async with server.async_client(transport) as client:
            await client.submit(queue, "h")
            ran: list[str] = []
            worker = rdq.Worker(client, queues=[queue], transport=transport, schedules=[good, bad])
            worker.handler("h")(lambda ctx: ran.append(ctx.id))
            with pytest.raises(rdq.InvalidRequest) as refused:
                await asyncio.wait_for(worker.run(handle_signals=False), 30)
            assert refused.value.code == "INVALID_CRON"
            assert any(bad.name in note for note in refused.value.__notes__)
            if transport == "http":
                assert refused.value.field == "spec.cron"
            await asyncio.sleep(0.2)
            assert ran == [] and worker.undeclared_schedules is None
            with pytest.raises(rdq.NotFound) as missing:
                await client.get_schedule(bad.name)
            assert missing.value.code == "SCHEDULE_NOT_FOUND"
            # Those before it are stored.
            assert (await client.get_schedule(good.name)).owner == "code"
            await client.delete_schedule(good.name)
            (pending,) = (await client.list_tasks(queue, status="PENDING")).items
            assert pending.handler_ref == "h"

    asyncio.run(scenario())
