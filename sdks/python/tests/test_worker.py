"""The worker against a real server, on the Work stream and over HTTP:
every rung of the outcome ladder as the server records it, typed payloads,
deferral, the dead-letter hook, lease extension and cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

import rdq
from conftest import Server
from rdq.envelope import Envelope, Outcome, Status

TRANSPORTS = ["grpc", "http"]


class CardDeclined(Exception):
    pass


class StolenCard(CardDeclined):
    pass


class GatewayTimeout(Exception):
    pass


class Charge(pydantic.BaseModel):
    order_id: int
    amount: str


@dataclasses.dataclass
class Email:
    to: str


def finished(env: Envelope) -> bool:
    return env.status in (Status.SUCCEEDED, Status.DEAD)


def work(
    server: Server,
    queue: str,
    transport: str,
    register: Callable[[rdq.Worker], None],
    submits: list[tuple[str, object]],
    *,
    done: Callable[[Envelope], bool] = finished,
    policy: dict[str, Any] | None = None,
    **options: Any,
) -> list[Envelope]:
    """Submits tasks, runs a worker until each satisfies `done`, stops it,
    and returns the tasks' envelopes in submit order."""

    async def scenario() -> list[Envelope]:
        async with server.async_client() as client:
            if policy:
                await client.set_queue_config(queue, policy)
            ids = [(await client.submit(queue, handler, payload)).id for handler, payload in submits]
            options.setdefault("concurrency", 4)
            worker = rdq.Worker(client, queues=[queue], transport=transport, **options)  # type: ignore[arg-type]
            register(worker)
            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                deadline = time.monotonic() + 60
                while True:
                    envs = [await client.get(i) for i in ids]
                    if all(done(e) for e in envs):
                        return envs
                    if running.done():
                        running.result()
                    assert time.monotonic() < deadline, [rdq.envelope.encode(e) for e in envs]
                    await asyncio.sleep(0.02)
            finally:
                worker.stop()
                await running

    return asyncio.run(scenario())


def last(env: Envelope) -> tuple[Outcome | None, str | None]:
    at = env.attempts[-1]
    return at.outcome, None if at.error is None else at.error.type


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_rung_of_the_ladder_as_the_server_records_it(server: Server, queue: str, transport: str) -> None:
    def mapper(ret: Any, exc: BaseException | None) -> rdq.Outcome:
        if ret == {"status": "FAILED"}:
            return rdq.Outcome.permanent_failure("the bank said FAILED", error_type="bank.Failed")
        return rdq.Outcome.success()

    def register(w: rdq.Worker) -> None:
        @w.handler("returns")
        def returns() -> str:
            return "anything"

        @w.handler("permanent-wrapper")
        async def permanent_wrapper() -> None:
            raise rdq.Permanent(GatewayTimeout("declined for good"))

        @w.handler("retryable-wrapper")
        def retryable_wrapper() -> None:
            raise rdq.Retryable(CardDeclined("try again"))

        @w.handler("permanent-class")
        def permanent_class() -> None:
            raise StolenCard("subclass of a permanent class")

        @w.handler("both-classes")
        def both_classes() -> None:
            raise CardDeclined("listed retryable and permanent")

        @w.handler("retryable-class")
        def retryable_class() -> None:
            raise GatewayTimeout("slow")

        @w.handler("glob")
        def glob() -> None:
            raise KeyError("matched by non_retryable_errors")

        @w.handler("default")
        async def default() -> None:
            raise ValueError("nothing classifies this")

        @w.handler("mapper", outcome_mapper=mapper)
        def mapped() -> dict[str, str]:
            return {"status": "FAILED"}

        @w.handler("mapper-forgives", outcome_mapper=mapper)
        def forgiven() -> None:
            raise rdq.Permanent(CardDeclined("already charged"))

    envs = work(
        server,
        queue,
        transport,
        register,
        [
            ("returns", None),
            ("permanent-wrapper", None),
            ("retryable-wrapper", None),
            ("permanent-class", None),
            ("both-classes", None),
            ("retryable-class", None),
            ("glob", None),
            ("default", None),
            ("mapper", None),
            ("mapper-forgives", None),
            ("no-such-handler", None),
        ],
        policy={"max_attempts": 2, "backoff": {"kind": "none"}, "non_retryable_errors": ["Key*"]},
        retryable=(CardDeclined, GatewayTimeout),
        permanent=(CardDeclined,),
    )
    got = [(e.handler_ref, e.status.value, len(e.attempts), *last(e)) for e in envs]
    assert got == [
        ("returns", "SUCCEEDED", 1, Outcome.SUCCESS, None),
        ("permanent-wrapper", "DEAD", 1, Outcome.PERMANENT_FAILURE, "test_worker.GatewayTimeout"),
        ("retryable-wrapper", "DEAD", 2, Outcome.RETRYABLE_FAILURE, "test_worker.CardDeclined"),
        ("permanent-class", "DEAD", 1, Outcome.PERMANENT_FAILURE, "test_worker.StolenCard"),
        ("both-classes", "DEAD", 1, Outcome.PERMANENT_FAILURE, "test_worker.CardDeclined"),
        ("retryable-class", "DEAD", 2, Outcome.RETRYABLE_FAILURE, "test_worker.GatewayTimeout"),
        ("glob", "DEAD", 1, Outcome.PERMANENT_FAILURE, "KeyError"),
        ("default", "DEAD", 2, Outcome.RETRYABLE_FAILURE, "ValueError"),
        ("mapper", "DEAD", 1, Outcome.PERMANENT_FAILURE, "bank.Failed"),
        ("mapper-forgives", "SUCCEEDED", 1, Outcome.SUCCESS, None),
        ("no-such-handler", "DEAD", 1, Outcome.PERMANENT_FAILURE, "rdq.NoHandler"),
    ]
    error = envs[7].attempts[0].error
    assert error is not None and error.message == "nothing classifies this"
    assert error.stack is not None and "ValueError: nothing classifies this" in error.stack
    assert envs[8].attempts[0].error is not None
    assert envs[8].attempts[0].error.message == "the bank said FAILED"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_payloads_arrive_typed_and_a_bad_one_is_permanent(server: Server, queue: str, transport: str) -> None:
    seen: list[object] = []

    def register(w: rdq.Worker) -> None:
        @w.handler("charge")
        async def charge(order: Charge, ctx: rdq.TaskContext) -> None:
            seen.append((order, ctx.queue, ctx.attempt, ctx.envelope.handler_ref))

        @w.handler("email")
        def email(ctx: rdq.TaskContext, message: Email) -> None:
            seen.append(message)

        @w.handler("raw")
        def raw(data: bytes) -> None:
            seen.append(data)

    envs = work(
        server,
        queue,
        transport,
        register,
        [
            ("charge", {"order_id": 7, "amount": "1.50"}),
            ("email", {"to": "a@b.c"}),
            ("raw", b"\x01\x02"),
            ("charge", {"order_id": "not a number"}),
        ],
    )
    assert [e.status.value for e in envs] == ["SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "DEAD"]
    expected = [(Charge(order_id=7, amount="1.50"), queue, 1, "charge"), Email("a@b.c"), b"\x01\x02"]
    assert sorted(map(repr, seen)) == sorted(map(repr, expected))
    assert last(envs[3]) == (Outcome.PERMANENT_FAILURE, "pydantic_core._pydantic_core.ValidationError")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_deferral_spends_no_attempt_and_the_dead_letter_hook_gets_the_reason(
    server: Server, queue: str, transport: str
) -> None:
    dead: list[tuple[str, str | None]] = []

    def register(w: rdq.Worker) -> None:
        @w.handler("defers-once")
        def defers_once(ctx: rdq.TaskContext) -> None:
            if ctx.deferral_count == 0:
                raise rdq.Defer(0.05)

        @w.handler("dies")
        async def dies() -> None:
            raise rdq.Permanent("no")

    async def on_dead_letter(env: Envelope) -> None:
        dead.append((env.id, None if env.dead_reason is None else env.dead_reason.code))

    envs = work(
        server, queue, transport, register, [("defers-once", None), ("dies", None)], on_dead_letter=on_dead_letter
    )
    deferred, died = envs
    assert (deferred.status, deferred.deferral_count, deferred.attempt_count) == (Status.SUCCEEDED, 1, 1)
    assert [a.outcome for a in deferred.attempts] == [Outcome.SUCCESS]
    assert died.status == Status.DEAD
    deadline = time.monotonic() + 30
    while not dead and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dead == [(died.id, "PERMANENT_FAILURE")]
    assert died.dead_reason is not None and died.dead_reason.by == "worker"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_long_handler_keeps_its_lease(server: Server, queue: str, transport: str) -> None:
    def register(w: rdq.Worker) -> None:
        @w.handler("slow")
        async def slow() -> None:
            await asyncio.sleep(3)  # three leases of 1 s

        @w.handler("slow-sync")
        def slow_sync() -> None:
            time.sleep(3)

    envs = work(server, queue, transport, register, [("slow", None), ("slow-sync", None)], policy={"lease_ms": 1000})
    for env in envs:
        assert env.status == Status.SUCCEEDED
        assert [a.outcome for a in env.attempts] == [Outcome.SUCCESS]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_deleted_task_cancels_its_running_handler(server: Server, queue: str, transport: str) -> None:
    started = threading.Event()
    outcomes: list[str] = []

    def register(w: rdq.Worker) -> None:
        @w.handler("waits")
        async def waits(ctx: rdq.TaskContext) -> None:
            started.set()
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                outcomes.append(f"cancelled: {ctx.cancel_reason}")
                raise

        @w.handler("waits-sync")
        def waits_sync(ctx: rdq.TaskContext) -> None:
            started.set()
            if ctx.cancelled_event.wait(120):
                outcomes.append(f"flag: {ctx.cancel_reason}")

    async def scenario(handler: str) -> None:
        started.clear()
        async with server.async_client() as client:
            await client.set_queue_config(queue, {"lease_ms": 1000})
            task = await client.submit(queue, handler)
            worker = rdq.Worker(client, queues=[queue], transport=transport)  # type: ignore[arg-type]
            register(worker)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.to_thread(started.wait, 60)
            await client.delete(task.id)
            deadline = time.monotonic() + 60
            while len(outcomes) < expected and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            worker.stop()
            await running

    expected = 1
    asyncio.run(scenario("waits"))
    expected = 2
    asyncio.run(scenario("waits-sync"))
    assert outcomes == ["cancelled: the lease was lost", "flag: the lease was lost"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_nothing_a_handler_raises_stops_the_worker(server: Server, queue: str, transport: str) -> None:
    def register(w: rdq.Worker) -> None:
        @w.handler("exits")
        def exits() -> None:
            raise SystemExit(3)

        @w.handler("interrupts")
        async def interrupts() -> None:
            raise KeyboardInterrupt

        @w.handler("fine")
        def fine() -> None:
            pass

    envs = work(server, queue, transport, register, [("exits", None), ("interrupts", None), ("fine", None)],
                policy={"max_attempts": 1})  # fmt: skip
    assert [(e.status.value, *last(e)) for e in envs] == [
        ("DEAD", Outcome.RETRYABLE_FAILURE, "SystemExit"),
        ("DEAD", Outcome.RETRYABLE_FAILURE, "KeyboardInterrupt"),
        ("SUCCEEDED", Outcome.SUCCESS, None),
    ]


def test_a_bad_hello_fails_run_with_its_code(server: Server) -> None:
    async def scenario() -> None:
        async with server.async_client() as client:
            worker = rdq.Worker(client, queues=["Not Valid"])
            with pytest.raises(rdq.InvalidRequest) as refused:
                await worker.run(handle_signals=False)
            assert refused.value.code == "INVALID_QUEUE_NAME"

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_prefetched_tasks_wait_for_a_handler_slot(server: Server, queue: str, transport: str) -> None:
    lock = threading.Lock()
    running = [0]
    most = [0]

    def register(w: rdq.Worker) -> None:
        @w.handler("busy")
        async def busy() -> None:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            await asyncio.sleep(0.05)
            with lock:
                running[0] -= 1

    envs = work(server, queue, transport, register, [("busy", None)] * 12, concurrency=2, prefetch=6)
    assert all(e.status == Status.SUCCEEDED for e in envs)
    assert most[0] == 2


REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("REQUEST_ID", default=None)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_each_async_handler_runs_in_a_task_and_context_of_its_own(server: Server, queue: str, transport: str) -> None:
    """Whether a handler starts eagerly (Python 3.12+) or on the next
    event-loop turn, it is its own asyncio task: `asyncio.timeout` works in
    it from its first line, and what it sets in a context variable is not
    seen by the next handler."""
    seen: list[tuple[int, str | None, bool]] = []
    tasks: set[asyncio.Task[Any]] = set()

    def register(w: rdq.Worker) -> None:
        @w.handler("ctx")
        async def ctx_handler(payload: int) -> None:
            before = REQUEST_ID.get()
            REQUEST_ID.set(f"request-{payload}")
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            timed_out = False
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.sleep(5)
            except TimeoutError:
                timed_out = True
            seen.append((payload, before, timed_out))

    envs = work(server, queue, transport, register, [("ctx", i) for i in range(8)], concurrency=2)
    assert all(e.status == Status.SUCCEEDED for e in envs)
    assert sorted(p for p, _, _ in seen) == list(range(8))
    assert all(before is None and timed_out for _, before, timed_out in seen), seen
    assert len(tasks) == 8, "one asyncio task a handler"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stopping_hands_back_prefetched_and_running_tasks(server: Server, queue: str, transport: str) -> None:
    async def scenario() -> list[Envelope]:
        async with server.async_client() as client:
            ids = [(await client.submit(queue, "hang")).id for _ in range(4)]
            worker = rdq.Worker(client, queues=[queue], transport=transport, concurrency=1, prefetch=3,  # type: ignore[arg-type]
                                shutdown_grace=0.1)  # fmt: skip
            started = asyncio.Event()

            @worker.handler("hang")
            async def hang() -> None:
                started.set()
                await asyncio.Event().wait()

            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(started.wait(), 60)
            while [e.status for e in [await client.get(i) for i in ids]] != [Status.IN_FLIGHT] * 4:
                await asyncio.sleep(0.02)
            worker.stop()
            await running
            return [await client.get(i) for i in ids]

    envs = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert [(e.status, e.attempt_count, e.attempts) for e in envs] == [(Status.PENDING, 0, [])] * 4


def test_a_program_without_an_event_loop_runs_the_worker_in_a_thread(server: Server, queue: str) -> None:
    client = server.async_client()
    worker = rdq.Worker(client, queues=[queue])
    worker.handler("plain")(lambda payload: None)
    thread = threading.Thread(target=worker.run_sync)
    thread.start()
    try:
        with server.client() as sync_client:
            task = sync_client.submit(queue, "plain", {"n": 1})
            deadline = time.monotonic() + 60
            while sync_client.get(task.id).status != Status.SUCCEEDED:
                assert time.monotonic() < deadline
                time.sleep(0.02)
    finally:
        worker.stop()  # from another thread than the worker's
        thread.join(60)
    assert not thread.is_alive()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_task_context_holds_the_tasks_fields(server: Server, queue: str, transport: str) -> None:
    """Every field of the context, on each transport, is the claimed
    envelope's: queue, handler, payload bytes, headers (the flow key among
    them), attempt and the deferral and redrive counts."""
    seen: list[dict[str, Any]] = []

    async def scenario() -> Envelope:
        async with server.async_client() as client:
            env = await client.submit(queue, "fields", b'{"order": 7}', flow_key="tenant-9", headers={"x-trace": "abc"})
            worker = rdq.Worker(client, queues=[queue], transport=transport, concurrency=2)  # type: ignore[arg-type]

            @worker.handler("fields")
            def fields(ctx: rdq.TaskContext) -> None:
                seen.append(
                    {
                        "id": ctx.id,
                        "queue": ctx.queue,
                        "handler_ref": ctx.handler_ref,
                        "payload": ctx.payload,
                        "headers": dict(ctx.headers),
                        "flow_key": ctx.flow_key,
                        "attempt": ctx.attempt,
                        "deferral_count": ctx.deferral_count,
                        "redrive_count": ctx.redrive_count,
                        "envelope_id": ctx.envelope.id,
                    }
                )
                if ctx.deferral_count == 0:
                    raise rdq.Defer(0.05)

            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                deadline = time.monotonic() + 60
                while (got := await client.get(env.id)).status != Status.SUCCEEDED:
                    assert time.monotonic() < deadline and not running.done(), got
                    await asyncio.sleep(0.02)
                return got
            finally:
                worker.stop()
                await running

    env = asyncio.run(scenario())
    common = {
        "id": env.id,
        "queue": queue,
        "handler_ref": "fields",
        "payload": b'{"order": 7}',
        "flow_key": "tenant-9",
        "attempt": 1,
        "redrive_count": 0,
        "envelope_id": env.id,
    }
    first = {"rdq.flow_key": "tenant-9", "x-trace": "abc", "rdq.submitted_by": "py"}
    # A deferral records the task's base priority in a header of its own.
    assert dict(env.headers) == {**first, "rdq.base_priority": "0"}
    assert seen == [
        {**common, "headers": first, "deferral_count": 0},
        {**common, "headers": dict(env.headers), "deferral_count": 1},
    ]
    assert all(type(s["payload"]) is bytes for s in seen)
