"""The worker's handler slots: at most n at once, handed over in arrival
order, and never lost to a run cancelled while it waits."""

from __future__ import annotations

import asyncio

from rdq.worker import _Slots


def test_slots_are_taken_at_once_while_free_then_handed_over_in_order() -> None:
    async def scenario() -> None:
        slots = _Slots(2)
        await slots.take()
        await slots.take()
        assert slots.free == 0
        order: list[int] = []

        async def waiter(i: int) -> None:
            await slots.take()
            order.append(i)

        waiters = [asyncio.create_task(waiter(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert order == [] and len(slots.waiting) == 3
        slots.give()
        await asyncio.sleep(0)
        assert order == [0]
        slots.give()
        slots.give()
        await asyncio.gather(*waiters)
        assert order == [0, 1, 2] and slots.free == 0
        for _ in range(2):
            slots.give()
        assert slots.free == 2 and not slots.waiting

    asyncio.run(scenario())


def test_a_run_cancelled_while_waiting_leaves_the_queue() -> None:
    async def scenario() -> None:
        slots = _Slots(1)
        await slots.take()
        cancelled = asyncio.create_task(slots.take())
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert not slots.waiting
        slots.give()
        assert slots.free == 1

    asyncio.run(scenario())


def test_a_slot_handed_to_a_run_cancelled_before_it_resumed_is_passed_on() -> None:
    async def scenario() -> None:
        slots = _Slots(1)
        await slots.take()
        first = asyncio.create_task(slots.take())
        second = asyncio.create_task(slots.take())
        await asyncio.sleep(0)
        slots.give()  # handed to `first`, which has not resumed yet
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 1)  # the slot went on to `second`
        assert first.cancelled() and slots.free == 0 and not slots.waiting

    asyncio.run(scenario())


def test_a_slot_freed_between_a_cancel_and_its_unwinding_is_kept() -> None:
    async def scenario() -> None:
        slots = _Slots(1)
        await slots.take()
        cancelled = asyncio.create_task(slots.take())
        await asyncio.sleep(0)
        cancelled.cancel()  # its wait is cancelled at once; the task unwinds later
        slots.give()  # drops the cancelled wait, keeps the slot
        await asyncio.gather(cancelled, return_exceptions=True)
        assert cancelled.cancelled() and slots.free == 1 and not slots.waiting

    asyncio.run(scenario())
