"""Handlers' asyncio tasks, started eagerly.

A handler runs as an asyncio task of its own (its own context, its own
`current_task()`, so `asyncio.timeout` and cancellation act on it alone).
Started lazily, as `asyncio.create_task` starts it, every task costs an
event-loop round trip before its first line runs and its outcome can be
settled; for short handlers that round trip is most of what the worker
spends on a task. Python 3.12 added `eager_start`: the task's first step
runs at once, inside the task, and a handler that never suspends is done
before `start_task` returns.

Python 3.11 has no eager start, so this module gives it one, the way 3.12
does it: a Task (asyncio's pure-Python implementation, whose step can be
called directly) is made without scheduling its first step, which then runs
at once in the task's context with the task as the loop's current task
(the task running the caller is set aside for the step and put back
after); a task that suspends is registered and goes on as any task, one
that finished never touches the event loop. It relies on asyncio's private
`_PyTask` and `_current_tasks` of 3.11, a release whose code no longer
changes; where they are missing, tasks start as `asyncio.Task` does.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["start_task"]

T = TypeVar("T")


def _lazy(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> asyncio.Task[T]:
    # The Task itself, not `create_task`: two fewer calls a task.
    return asyncio.Task(coro, loop=loop)


if sys.version_info >= (3, 12):

    def start_task(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> asyncio.Task[T]:
        """`coro` as an asyncio task on `loop`, run up to its first
        suspension before this returns."""
        return asyncio.Task(coro, loop=loop, eager_start=True)

else:
    _tasks: Any = asyncio.tasks
    _format_helpers: Any = getattr(asyncio, "format_helpers", None)
    _PyTask: Any = getattr(_tasks, "_PyTask", None)
    _current_tasks: Any = getattr(_tasks, "_current_tasks", None)
    _names = itertools.count(1)

    if (
        _PyTask is None
        or _format_helpers is None
        or not isinstance(_current_tasks, dict)
        or not hasattr(_PyTask, "_Task__step")
    ):
        start_task = _lazy
    else:

        class _EagerTask(_PyTask):  # type: ignore[misc]
            """`asyncio.Task` (3.11's Python implementation) whose first step
            runs in its constructor, as 3.12's `eager_start=True`."""

            def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> None:
                # Task.__init__ and Future.__init__, but the first step is run
                # here, not scheduled, and the name is made when asked for.
                self._loop = loop
                self._callbacks: list[Any] = []
                if loop.get_debug():
                    self._source_traceback = _format_helpers.extract_stack(sys._getframe(1))
                self._name: str | None = None
                self._num_cancels_requested = 0
                self._must_cancel = False
                self._fut_waiter = None
                self._coro = coro
                self._context = contextvars.copy_context()
                caller = _current_tasks.pop(loop, None)
                try:
                    self._context.run(self._Task__step)
                finally:
                    if caller is not None:
                        _current_tasks[loop] = caller
                if not self.done():
                    asyncio.tasks._register_task(self)

            def get_name(self) -> str:
                name = self._name
                if name is None:
                    name = self._name = f"rdq-handler-{next(_names)}"
                return name

        def start_task(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> asyncio.Task[T]:
            """`coro` as an asyncio task on `loop`, run up to its first
            suspension before this returns."""
            task: asyncio.Task[T] = _EagerTask(coro, loop)
            return task
