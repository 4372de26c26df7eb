"""`Worker`: runs registered handlers on the tasks of some queues.

Tasks arrive on the gRPC `Work` stream (or by HTTP claims, the fallback);
each runs as an asyncio task (an `async def` handler) or in a thread (a
plain function), at most `concurrency` at once. Outcomes are resolved by
the ladder (`rdq.outcome`) and settled in batches; leases are extended
while a handler runs; SIGTERM stops taking tasks, lets running ones finish
within `shutdown_grace`, and hands the rest back (RELEASE, no attempt spent).
A cancel asked of a running task (a `WorkCancel` on the stream, or a lease
extension's answer) cancels its handler; what the handler then does is
reported, a failure as `rdq.Cancelled`. Schedules declared with
`schedules=` are stored (owner `code`) before the first task is taken;
those put by code that the worker does not declare are reported, never
deleted (docs/schedules.md, "Declared in code").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from . import _calls
from ._eager import start_task
from ._handlers import Handler, PayloadError
from ._transport import Settle, Transport
from .client import AsyncClient
from .context import TaskContext
from .envelope import CancelRequest, Envelope, format_timestamp
from .errors import InvalidRequest, RdqError
from .outcome import CANCELLED_ERROR_TYPE, NO_HANDLER_ERROR_TYPE, Kind, Ladder, Outcome, OutcomeMapper
from .schedules import Schedule

log = logging.getLogger("rdq.worker")

F = TypeVar("F", bound=Callable[..., Any])

DeadLetterHook = Callable[[Envelope], Any]
"""Called with the task's envelope when a settle from this worker sent it
to the DLQ; why is in `envelope.dead_reason` (PERMANENT_FAILURE,
ATTEMPTS_EXHAUSTED, HANDLER_VERSION_MISMATCH, …) when the server records
reasons. May be `async def`. Its exceptions are logged, never raised."""


class _Slots:
    """At most `n` handlers run at once: a count of free slots, and the
    runs waiting for one, served in arrival order. `asyncio.Semaphore`
    does the same, with a scan of its waiters on every acquire; this costs
    a comparison when a slot is free, which is on every task's path."""

    __slots__ = ("free", "waiting")

    def __init__(self, n: int) -> None:
        self.free = n
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def take(self) -> None:
        """Returns holding a slot: at once when one is free and nobody
        waits, else when one is handed over."""
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return
        turn = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if not turn.cancelled():
                self.give()  # handed over as it was cancelled: pass it on
            elif turn in self.waiting:  # `give` may have dropped it already
                self.waiting.remove(turn)
            raise

    def give(self) -> None:
        """Frees a slot: handed to the longest waiting run, if any."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1


@dataclass(eq=False, slots=True)
class Running:
    """A task this worker holds, from arrival to settle."""

    ctx: TaskContext
    lease_ms: int
    renew_at: float
    expires_at: float
    generation: int = 0
    stream: int = 0
    task: asyncio.Task[None] | None = None
    released: bool = False
    abandoned: bool = False
    """Cancelled for a lost lease or at shutdown: its outcome is not reported."""
    started: bool = False
    finished: bool = False
    """Settled (or handed back): the worker holds it no more."""
    _done: asyncio.Event | None = None
    """Made only when something waits for the run to finish (shutdown)."""

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()

    async def wait(self) -> None:
        """Returns once the run is finished."""
        if self.finished:
            return
        if self._done is None:
            self._done = asyncio.Event()
        await self._done.wait()


class Worker:
    """Runs handlers on the tasks of `queues`.

    ```python
    worker = rdq.Worker(client, queues=["payments"], concurrency=32)

    @worker.handler("charge-payment")
    async def charge(order: Order, ctx: rdq.TaskContext) -> None:
        ...

    await worker.run()     # until SIGTERM / SIGINT or worker.stop()
    ```
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        queues: Sequence[str],
        concurrency: int = 16,
        transport: Literal["grpc", "http"] = "grpc",
        lease_ms: int | None = None,
        outcome_mapper: OutcomeMapper | None = None,
        retryable: Sequence[type[BaseException]] = (),
        permanent: Sequence[type[BaseException]] = (),
        on_dead_letter: DeadLetterHook | None = None,
        shutdown_grace: float = 30.0,
        poll_interval: float = 0.5,
        prefetch: int = 0,
        schedules: Sequence[Schedule] = (),
        streams: int = 1,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        if not 1 <= concurrency or not 0 <= prefetch or concurrency + prefetch > 10000:
            raise ValueError("concurrency is at least 1, prefetch at least 0, and together at most 10000")
        if not 1 <= streams <= 64:
            raise ValueError("streams is 1 to 64")
        declared: set[str] = set()
        for i, s in enumerate(schedules):
            try:
                s.check()
            except RdqError as err:
                err.add_note(f"in schedules[{i}] ({s.name!r})")
                raise
            if s.name in declared:
                raise InvalidRequest(
                    "INVALID_ARGUMENT", f"schedule {s.name} is declared twice", status=400, field="schedules"
                )
            declared.add(s.name)
        self.schedules = list(schedules)
        self._undeclared: list[str] | None = None
        self.client = client
        self.queues = list(queues)
        self.concurrency = concurrency
        self.transport_kind = transport
        self.lease_ms = lease_ms
        self.ladder = Ladder(outcome_mapper, tuple(retryable), tuple(permanent))
        self.on_dead_letter = on_dead_letter
        self.shutdown_grace = shutdown_grace
        self.poll_interval = poll_interval
        self.prefetch = prefetch
        self.streams = streams
        # At most `concurrency` handlers run; prefetched tasks wait here.
        self._slots = _Slots(concurrency)
        self.handlers: dict[str, Handler] = {}
        self.running: dict[str, Running] = {}
        self._stopping = False
        self._stop_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._transport: Transport | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._heartbeat_wake: asyncio.Event | None = None
        self._next_renewal = 0.0
        self.slot_freed: asyncio.Event | None = None

    # -- registration -------------------------------------------------------

    def handler(self, name: str, *, outcome_mapper: OutcomeMapper | None = None) -> Callable[[F], F]:
        """Registers the decorated function for tasks whose `handler_ref` is
        `name`. It may be `async def` or plain, and take the payload
        (annotated with a pydantic model, a dataclass, `bytes`, or anything
        else for parsed JSON), a `TaskContext`, both, or nothing."""

        def register(fn: F) -> F:
            self.handlers[name] = Handler.of(name, fn, outcome_mapper)
            return fn

        return register

    # -- schedules ----------------------------------------------------------

    async def _declare_schedules(self) -> None:
        """Stores the declared schedules (owner `code`), then records the
        code-owned schedules the server has that none of them names. A
        worker that declares none neither stores nor lists any."""
        if not self.schedules:
            return
        for s in self.schedules:
            try:
                _, created = await self.client._run(_calls.put_schedule(s, "code"))
            except RdqError as err:
                err.add_note(f"declaring schedule {s.name}")
                raise
            log.debug("rdq worker: schedule %s declared (%s)", s.name, "created" if created else "replaced")
        try:
            stored = await self.client._run(_calls.list_schedules())
        except RdqError as err:
            log.warning("rdq worker: listing schedules to find those no longer declared failed: %s", err)
            return
        names = {s.name for s in self.schedules}
        gone = [st.name for st in stored if st.owner == "code" and st.name not in names]
        for name in gone:
            log.warning(
                "rdq worker: schedule %s was put by code and is declared no more; it still fires: "
                "delete it if it should stop (rdq schedule delete %s)",
                name,
                name,
            )
        self._undeclared = gone

    @property
    def undeclared_schedules(self) -> list[str] | None:
        """The schedules put by code (by this program or another) that this
        worker does not declare, by name: they keep firing until deleted
        (`rdq schedule delete NAME`, or `client.delete_schedule`). Only
        schedules the client's token may read are seen. None until `run()`
        has stored the worker's own schedules (and always when it declares
        none, or the list could not be read), then a list, empty when every
        code-owned schedule is declared."""
        return None if self._undeclared is None else list(self._undeclared)

    # -- running ------------------------------------------------------------

    def stop(self) -> None:
        """Stops taking tasks; `run()` returns once running ones finished or
        were handed back. Safe to call from any thread and more than once."""
        loop, event = self._loop, self._stop_event
        if loop is None or event is None:
            self._stopping = True
            return
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            self._begin_stop()
        else:
            loop.call_soon_threadsafe(self._begin_stop)

    def _begin_stop(self) -> None:
        if not self._stopping:
            log.info("rdq worker: stopping, %d tasks running", len(self.running))
        if not self._stopping and self._transport is not None:
            self._stopping = True
            self._transport.stop_receiving()
        self._stopping = True
        if self._stop_event is not None:
            self._stop_event.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def run(self, *, handle_signals: bool = True) -> None:
        """Works tasks until `stop()` (or SIGTERM/SIGINT with
        `handle_signals`, in the main thread), then shuts down gracefully.

        Before it takes any task it stores the declared `schedules`; one
        the server refuses raises its `RdqError` (INVALID_CRON,
        UNKNOWN_TIME_ZONE, …, with a note naming the schedule) without
        working; those before it are stored."""
        from ._grpc_transport import GrpcStreams, GrpcUnsupported
        from ._http_transport import HttpTransport

        await self._declare_schedules()
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._heartbeat_wake = asyncio.Event()
        self.slot_freed = asyncio.Event()
        if self._stopping:
            self._stop_event.set()
        self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="rdq-handler")
        transport: Transport
        if self.transport_kind == "grpc":
            transport = GrpcStreams(self, self.streams)
        else:
            transport = HttpTransport(self)
        self._transport = transport
        if self._stopping:
            transport.stop_receiving()
        installed = self._install_signals() if handle_signals else []
        heartbeat = asyncio.create_task(self._heartbeat())
        receiving = asyncio.create_task(transport.receive())
        stop_wait = asyncio.create_task(self._stop_event.wait())
        try:
            while True:
                done, _ = await asyncio.wait({receiving, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if receiving in done and isinstance(receiving.exception(), GrpcUnsupported):
                    log.warning("rdq worker: the server has no gRPC Work stream; working over HTTP")
                    await transport.close()
                    transport = self._transport = HttpTransport(self)
                    receiving = asyncio.create_task(transport.receive())
                    continue
                if receiving in done:
                    receiving.result()  # a fatal error (a bad hello, no permission) surfaces here
                break
            self._stopping = True
            await self._drain()
        finally:
            stop_wait.cancel()
            receiving.cancel()
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiving
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await transport.close()
            for sig in installed:
                self._loop.remove_signal_handler(sig)
            self._threads.shutdown(wait=False, cancel_futures=True)

    def run_sync(self, *, handle_signals: bool = True) -> None:
        """`run()` for a program without an event loop of its own."""
        asyncio.run(self.run(handle_signals=handle_signals))

    def _install_signals(self) -> list[signal.Signals]:
        if threading.current_thread() is not threading.main_thread():
            return []
        assert self._loop is not None
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self._begin_stop)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
        return installed

    async def _drain(self) -> None:
        """Hands back prefetched tasks, lets running ones finish within the
        grace period, then cancels and releases the rest, then waits for the
        last settles."""
        for r in list(self.running.values()):
            if not r.started:
                self.cancel(r, "the worker is shutting down", release=True)
        pending = list(self.running.values())
        if pending:
            waits = [asyncio.create_task(r.wait()) for r in pending]
            _, late = await asyncio.wait(waits, timeout=self.shutdown_grace)
            for w in late:
                w.cancel()
        cancelled = [r for r in self.running.values() if not r.finished]
        for r in cancelled:
            self.cancel(r, "the worker is shutting down", release=True)
        if cancelled:
            # Cancelled handlers settle their RELEASE as they unwind.
            waits = [asyncio.create_task(r.wait()) for r in cancelled]
            _, late = await asyncio.wait(waits, timeout=5.0)
            for w in late:
                w.cancel()
        assert self._transport is not None
        await self._transport.flush()

    # -- one task -----------------------------------------------------------

    def accept(self, ctx: TaskContext, lease_ms: int, generation: int, stream: int = 0) -> None:
        """A task arrived (on Work stream `stream`): run it, or hand it back
        when stopping."""
        now = time.monotonic()
        r = Running(ctx, lease_ms, now + lease_ms / 3000, now + lease_ms / 1000, generation, stream)
        self.running[ctx.id] = r
        if self._stopping:
            r.released = True
            self._settle(r, Outcome(Kind.RELEASE))
            return
        # Started eagerly (`rdq._eager`): the handler runs up to its first
        # suspension now, and one that never suspends (or one whose slot is
        # free and whose work is done at once) settles without an event-loop
        # round trip of its own. Its context and `current_task()` are its
        # own task's, as with `create_task`.
        assert self._loop is not None
        r.task = start_task(self._execute(r), self._loop)
        if self._heartbeat_wake is not None and r.renew_at < self._next_renewal:
            self._heartbeat_wake.set()

    async def _execute(self, r: Running) -> None:
        ctx = r.ctx
        outcome: Outcome | None = None
        try:
            await self._slots.take()
            try:
                r.started = True
                if self._stopping:
                    r.released = True  # prefetched, never started: hand it back
                elif not ctx.cancelled:
                    handler = self.handlers.get(ctx.handler_ref)
                    outcome = _no_handler(ctx) if handler is None else await self._call(handler, ctx)
            finally:
                self._slots.give()
        except asyncio.CancelledError:
            if not ctx.cancelled:
                raise
        request = ctx.cancel_request
        if r.abandoned or r.released or (outcome is None and request is None):
            # Handed back at shutdown, or the lease is gone: the RELEASE of a
            # lost lease is refused (LEASE_LOST) and changes nothing, but on
            # the Work stream it gives the task's credit back.
            self._settle(r, Outcome(Kind.RELEASE), quiet=not r.released)
            return
        if request is not None and (outcome is None or outcome.kind is not Kind.SUCCESS):
            # Stopped by a cancel: reported as such, unless it succeeded.
            outcome = cancelled_outcome(request)
        assert outcome is not None
        self._settle(r, outcome)

    async def _call(self, handler: Handler, ctx: TaskContext) -> Outcome | None:
        """The handler's outcome; None when the worker cancelled it."""
        returned: Any = None
        try:
            args = handler.arguments(ctx)
            if handler.is_async:
                returned = await handler.fn(*args)
            else:
                assert self._loop is not None
                returned = await self._loop.run_in_executor(self._threads, _call_sync, handler.fn, args)
        except asyncio.CancelledError:
            if not ctx.cancelled:
                raise
            return None
        except PayloadError as err:
            return Outcome.permanent_failure(err.__cause__ or err)
        except BaseException as err:
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                log.warning("rdq worker: handler %r raised %s", handler.name, type(err).__name__)
            return self.ladder.resolve(None, err, handler.outcome_mapper)
        return self.ladder.resolve(returned, None, handler.outcome_mapper)

    def cancel(self, r: Running, reason: str, *, release: bool = False) -> None:
        """Cancels a running task: `CancelledError` in an async handler, the
        context's flag for a sync one. Its outcome is not reported; with
        `release` the task is handed back instead (shutdown)."""
        if r.finished or r.abandoned:
            return
        r.abandoned = True
        r.released = release
        r.ctx._cancel(reason)
        log.info("rdq worker: task %s cancelled: %s", r.ctx.id, reason)
        handler = self.handlers.get(r.ctx.handler_ref)
        if r.task is not None and handler is not None and handler.is_async:
            r.task.cancel()
        elif r.task is not None and release:
            # A thread cannot be interrupted: hand the task back now, and
            # drop the handler's outcome when it eventually returns.
            self._settle(r, Outcome(Kind.RELEASE))

    def cancel_task(self, task_id: str, reason: str) -> None:
        """Abandons a task this worker runs, as a lost lease does: its
        handler is cancelled and its outcome not reported."""
        r = self.running.get(task_id)
        if r is not None:
            self.cancel(r, reason)

    def request_cancel(self, task_id: str, lease_token: str, request: CancelRequest) -> None:
        """A cancel was asked of a task (the server's `WorkCancel`, or a lease
        extension's answer): an async handler's asyncio task is cancelled
        (`CancelledError` with the message `cancelled by …`), a sync one sees
        `ctx.cancelled`; `ctx.cancel_request` says who asked. What the
        handler then does is reported: a return is still a success, anything
        else a failure of type `rdq.Cancelled`. A task not yet started is
        not run. `lease_token` empty matches any lease of the task."""
        r = self.running.get(task_id)
        if r is None or (lease_token and r.ctx.lease_token != lease_token):
            return
        ctx = r.ctx
        if r.finished or r.abandoned or ctx.cancel_request is not None:
            return
        ctx.cancel_request = request
        why = cancelled_message(request)
        ctx._cancel(why)
        log.info("rdq worker: task %s: %s", ctx.id, why)
        if r.task is None:
            return
        if not r.started:
            # Prefetched, waiting for a handler slot: never run.
            self._settle(r, cancelled_outcome(request))
            r.task.cancel(why)
            return
        handler = self.handlers.get(ctx.handler_ref)
        if handler is not None and handler.is_async:
            r.task.cancel(why)

    def _forget(self, r: Running) -> None:
        if self.running.get(r.ctx.id) is r:
            del self.running[r.ctx.id]
        r.finish()
        if self.slot_freed is not None:
            self.slot_freed.set()

    def _settle(self, r: Running, outcome: Outcome, *, quiet: bool = False) -> None:
        if r.finished:
            return
        self._forget(r)
        assert self._transport is not None
        self._transport.settle(Settle(r.ctx.id, r.ctx.lease_token, outcome, r.generation, quiet, r.stream))

    def settled(self, s: Settle, env: Envelope | None, code: str | None, detail: str | None) -> None:
        """A settle's answer arrived (called by the transport)."""
        task_id = s.id
        if code is not None:
            if s.quiet and code == "LEASE_LOST":
                return
            log.warning("rdq worker: settling %s refused: %s: %s", task_id, code, detail or "")
            return
        if env is not None and self.on_dead_letter is not None and env.status.value == "DEAD":
            hook = asyncio.get_running_loop().create_task(self._dead_letter(env))
            self._background.add(hook)
            hook.add_done_callback(self._background.discard)

    async def _dead_letter(self, env: Envelope) -> None:
        assert self.on_dead_letter is not None
        try:
            result = self.on_dead_letter(env)
            if isinstance(result, Awaitable):
                await result
        except Exception:
            log.exception("rdq worker: the dead-letter hook failed for task %s", env.id)

    # -- leases -------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Extends every running task's lease each third of its length; a
        lease that ran out with no extension answered cancels its handler."""
        while True:
            now = time.monotonic()
            # A run a cancel was asked of keeps its lease while its handler
            # winds down: what it then does is still reported.
            due = [r for r in self.running.values() if r.renew_at <= now and not r.abandoned]
            for r in due:
                if r.expires_at <= now:
                    self.cancel(r, "the lease ran out")
                    continue
                r.renew_at = now + r.lease_ms / 3000
                extension = asyncio.create_task(self._extend(r))
                self._background.add(extension)
                extension.add_done_callback(self._background.discard)
            nearest = min((r.renew_at for r in self.running.values()), default=now + 1.0)
            # A task arriving whose renewal is due before `nearest` wakes this early.
            assert self._heartbeat_wake is not None
            self._heartbeat_wake.clear()
            pause = min(1.0, max(0.01, nearest - time.monotonic()))
            self._next_renewal = time.monotonic() + pause
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_wake.wait(), pause)

    async def _extend(self, r: Running) -> None:
        assert self._transport is not None
        sent = time.monotonic()
        try:
            extension = await self._transport.extend(r.ctx.id, r.ctx.lease_token, r.lease_ms, r.stream)
        except Exception as err:
            log.warning("rdq worker: extending the lease of %s failed: %s", r.ctx.id, err)
            r.renew_at = min(r.expires_at, time.monotonic() + r.lease_ms / 8000)
            return
        if not extension.kept:
            if not r.finished:
                self.cancel(r, "the lease was lost")
            return
        r.expires_at = sent + r.lease_ms / 1000
        if extension.cancel_requested and r.ctx.cancel_request is None and not r.finished:
            request = extension.request or await self._cancel_request_of(r.ctx.id)
            self.request_cancel(r.ctx.id, r.ctx.lease_token, request)

    async def _cancel_request_of(self, task_id: str) -> CancelRequest:
        """Who asked, read from the task when a bare ack only said that a
        cancel was asked (the stream's `WorkCancel` usually comes first)."""
        with contextlib.suppress(RdqError, OSError, TimeoutError):
            env = await asyncio.wait_for(self.client.get(task_id), 10.0)
            if env.cancel_requested is not None:
                return env.cancel_requested
        return CancelRequest(at=format_timestamp(datetime.now(UTC)), by="")

    @property
    def capacity(self) -> int:
        """Tasks held at once: running handlers and prefetched tasks."""
        return self.concurrency + self.prefetch

    @property
    def free_slots(self) -> int:
        return self.capacity - len(self.running)


def _no_handler(ctx: TaskContext) -> Outcome:
    return Outcome.permanent_failure(
        f"no handler is registered for {ctx.handler_ref!r} on this worker",
        error_type=NO_HANDLER_ERROR_TYPE,
    )


def _call_sync(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn(*args)


def cancelled_message(request: CancelRequest) -> str:
    """`cancelled by <by>: <message>` ("no reason given" without a message),
    the message a cancelled failure is recorded with, as in every SDK;
    `cancelled` when who asked is not known."""
    if not request.by:
        return f"cancelled: {request.message}" if request.message else "cancelled"
    return f"cancelled by {request.by}: {request.message or 'no reason given'}"


def cancelled_outcome(request: CancelRequest) -> Outcome:
    return Outcome.permanent_failure(cancelled_message(request), error_type=CANCELLED_ERROR_TYPE)
