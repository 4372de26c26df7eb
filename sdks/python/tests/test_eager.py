"""`rdq._eager.start_task`: a handler's task starts at once and is a task
like any other, on every supported Python (3.11 through the module's own
eager start, 3.12+ through `eager_start`)."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from rdq._eager import start_task

VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar("VAR", default=None)


def test_a_task_that_never_suspends_is_done_when_started() -> None:
    async def scenario() -> None:
        caller = asyncio.current_task()
        inside: list[asyncio.Task[object] | None] = []

        async def body() -> None:
            inside.append(asyncio.current_task())
            VAR.set("inside")

        task = start_task(body(), asyncio.get_running_loop())
        assert task.done() and task.result() is None
        assert inside == [task], "the task is the current task while it runs"
        assert asyncio.current_task() is caller, "the caller's task is current again"
        assert VAR.get() is None, "the task's context is its own"
        assert task not in asyncio.all_tasks()

    asyncio.run(scenario())


def test_a_task_that_suspends_goes_on_as_any_task() -> None:
    async def scenario() -> None:
        steps: list[str] = []
        release = asyncio.Event()

        async def body() -> None:
            steps.append("first")
            await release.wait()
            steps.append(f"second in {asyncio.current_task() is task}")
            await asyncio.sleep(0)
            steps.append("third")

        task = start_task(body(), asyncio.get_running_loop())
        assert steps == ["first"] and not task.done()
        assert task in asyncio.all_tasks()
        release.set()
        await task
        assert steps == ["first", "second in True", "third"]

    asyncio.run(scenario())


def test_a_timeout_from_the_first_line_cancels_the_task_alone() -> None:
    async def scenario() -> None:
        async def body() -> str:
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.sleep(5)
            except TimeoutError:
                return "timed out"
            return "slept"

        task = start_task(body(), asyncio.get_running_loop())
        assert await task == "timed out"
        caller = asyncio.current_task()
        assert caller is not None and not caller.cancelling()

    asyncio.run(scenario())


def test_cancelling_a_suspended_task_raises_in_it() -> None:
    async def scenario() -> None:
        got: list[str] = []

        async def body() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError as err:
                got.append(str(err.args[0]) if err.args else "")
                raise

        task = start_task(body(), asyncio.get_running_loop())
        task.cancel("stop")
        with pytest.raises(asyncio.CancelledError):
            await task
        assert got == ["stop"] and task.cancelled()

    asyncio.run(scenario())


def test_an_exception_in_the_first_step_is_the_tasks() -> None:
    async def scenario() -> None:
        async def body() -> None:
            raise ValueError("boom")

        task = start_task(body(), asyncio.get_running_loop())
        assert task.done()
        assert isinstance(task.exception(), ValueError)

    asyncio.run(scenario())


def test_tasks_started_from_a_task_started_eagerly_nest() -> None:
    async def scenario() -> None:
        current: list[tuple[str, asyncio.Task[object] | None]] = []
        loop = asyncio.get_running_loop()

        async def inner() -> None:
            current.append(("inner", asyncio.current_task()))

        async def outer() -> None:
            current.append(("outer", asyncio.current_task()))
            inner_task.append(start_task(inner(), loop))
            current.append(("outer again", asyncio.current_task()))

        inner_task: list[asyncio.Task[None]] = []
        outer_task = start_task(outer(), loop)
        assert current == [("outer", outer_task), ("inner", inner_task[0]), ("outer again", outer_task)]
        assert outer_task is not inner_task[0]

    asyncio.run(scenario())


@pytest.mark.parametrize("debug", [False, True])
def test_a_task_has_a_name_and_a_readable_repr(debug: bool) -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def body() -> None:
            await release.wait()

        task = start_task(body(), asyncio.get_running_loop())
        assert isinstance(task.get_name(), str) and task.get_name()
        assert task.get_name() == task.get_name()
        task.set_name("charge")
        assert task.get_name() == "charge" and "charge" in repr(task)
        release.set()
        await task

    asyncio.run(scenario(), debug=debug)
