"""Cancelling PENDING tasks and the DLQ by reason, against a real server:
cancels by id and by filter (dry runs change nothing), refusals with the
server's codes, and a cancelled task listed, counted, exported and redriven
by its reason."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

import rdq
from conftest import Server, kill_by_hand
from rdq.envelope import DeadReasonCode, Status


def test_a_task_cancelled_by_id_is_dead_with_who_and_why(any_store_server: Server, queue: str) -> None:
    with any_store_server.client() as client:
        kept = client.submit(queue, "h", delay=3600)
        doomed = client.submit(queue, "h", delay=3600)
        result = client.cancel(queue, ids=[doomed.id], message="duplicate order")
        assert (result.queue, result.dry_run, result.count, result.ids) == (queue, False, 1, [doomed.id])
        dead = client.get(doomed.id)
        assert dead.status == Status.DEAD and dead.attempts == []
        assert dead.dead_reason is not None
        assert (dead.dead_reason.code, dead.dead_reason.by, dead.dead_reason.message) == (
            DeadReasonCode.CANCELLED,
            "py",
            "duplicate order",
        )
        rdq.envelope.parse_timestamp(dead.dead_reason.at)
        assert client.get(kept.id).status == Status.PENDING


def test_cancel_by_filter_takes_only_matching_tasks_and_a_dry_run_changes_nothing(server: Server, queue: str) -> None:
    with server.client() as client:
        acme = [client.submit(queue, "report", headers={"tenant": "acme"}, delay=3600) for _ in range(3)]
        other = client.submit(queue, "report", headers={"tenant": "other"}, delay=3600)
        mail = client.submit(queue, "mail", headers={"tenant": "acme"}, delay=3600)

        dry = client.cancel(queue, handler_ref="report", headers={"tenant": "acme"}, dry_run=True)
        assert (dry.dry_run, dry.count, sorted(dry.ids)) == (True, 3, sorted(e.id for e in acme))
        assert {client.get(e.id).status for e in acme} == {Status.PENDING}

        assert client.cancel(queue, handler_ref="report", older_than=timedelta(hours=1)).count == 0
        assert client.cancel(queue, handler_ref="report", older_than=3_600_000).count == 0

        first = client.cancel(queue, handler_ref="report", headers={"tenant": "acme"}, limit=2)
        assert first.count == 2 and set(first.ids) <= {e.id for e in acme}
        rest = client.cancel(queue, handler_ref="report", headers={"tenant": "acme"}, older_than=0)
        assert rest.count == 1
        assert {client.get(e.id).status for e in acme} == {Status.DEAD}
        assert client.get(other.id).status == client.get(mail.id).status == Status.PENDING


def test_cancel_refusals_carry_the_servers_code(server: Server, queue: str) -> None:
    with server.client() as client:
        task = client.submit(queue, "h", delay=3600)
        client.cancel(queue, ids=[task.id])
        with pytest.raises(rdq.Conflict) as twice:
            client.cancel(queue, ids=[task.id])
        assert (twice.value.code, twice.value.status) == ("INVALID_TRANSITION", 409)
        with pytest.raises(rdq.NotFound) as unknown:
            client.cancel(queue, ids=["01J2ZK7Q8XW5H3N9G4T6B8RDQ0"])
        assert (unknown.value.code, unknown.value.status) == ("TASK_NOT_FOUND", 404)
        with pytest.raises(rdq.InvalidRequest) as bad_id:
            client.cancel(queue, ids=["not-an-id"])
        assert bad_id.value.code == "INVALID_FIELD"
        with pytest.raises(rdq.InvalidRequest) as negative:
            client.cancel(queue, older_than=-1)
        assert negative.value.code == "INVALID_FIELD"


def test_the_dlq_is_listed_counted_exported_and_redriven_by_reason(any_store_server: Server, queue: str) -> None:
    with any_store_server.client() as client:
        failed = kill_by_hand(client, queue)
        assert failed.dead_reason is not None
        assert (failed.dead_reason.code, failed.dead_reason.by) == (DeadReasonCode.PERMANENT_FAILURE, "worker")
        cancelled = client.submit(queue, "h", delay=3600)
        client.cancel(queue, ids=[cancelled.id], message="not needed")

        (listed,) = client.dlq_list(queue, reason="CANCELLED").items
        assert listed.id == cancelled.id
        assert listed.dead_reason is not None and listed.dead_reason.message == "not needed"
        assert [e.id for e in client.dlq_list(queue, reason=DeadReasonCode.PERMANENT_FAILURE).items] == [failed.id]
        assert client.dlq_list(queue, reason=rdq.UNRECORDED).items == []
        assert [e.id for e in client.dlq_export(queue, reason="CANCELLED")] == [cancelled.id]
        reasons = {(r.reason, r.count) for r in client.dlq_reasons(queue)}
        assert reasons == {("CANCELLED", 1), ("PERMANENT_FAILURE", 1)}

        assert client.dlq_redrive(queue, reason="CANCELLED", dry_run=True).ids == [cancelled.id]
        assert client.dlq_redrive(queue, reason="CANCELLED").ids == [cancelled.id]
        back = client.get(cancelled.id)
        assert (back.status, back.redrive_count, back.dead_reason) == (Status.PENDING, 1, None)
        assert [(r.reason, r.count) for r in client.dlq_reasons(queue)] == [("PERMANENT_FAILURE", 1)]


def test_an_unknown_reason_filter_is_refused(server: Server, queue: str) -> None:
    with server.client() as client:
        kill_by_hand(client, queue)
        refusals: list[Callable[[], object]] = [
            lambda: client.dlq_list(queue, reason="FELL_OVER"),
            lambda: list(client.dlq_export(queue, reason="FELL_OVER")),
            lambda: client.dlq_redrive(queue, reason="FELL_OVER", dry_run=True),
        ]
        for refused_call in refusals:
            with pytest.raises(rdq.InvalidRequest) as refused:
                refused_call()
            assert refused.value.code == "INVALID_ARGUMENT"


def test_the_async_client_cancels_and_counts_reasons(server: Server, queue: str) -> None:
    async def scenario() -> None:
        async with server.async_client() as client:
            task = await client.submit(queue, "h", delay=3600)
            assert (await client.cancel(queue, ids=[task.id], dry_run=True)).ids == [task.id]
            assert (await client.cancel(queue, ids=[task.id])).count == 1
            with pytest.raises(rdq.Conflict):
                await client.cancel(queue, ids=[task.id])
            assert await client.dlq_reasons(queue) == [rdq.ReasonCount("CANCELLED", 1)]
            page = await client.dlq_list(queue, reason="CANCELLED")
            assert [e.id for e in page.items] == [task.id]
            assert [e.id async for e in client.dlq_export(queue, reason="CANCELLED")] == [task.id]
            assert (await client.dlq_redrive(queue, reason="CANCELLED")).count == 1
            assert await client.dlq_reasons(queue) == []

    asyncio.run(scenario())
