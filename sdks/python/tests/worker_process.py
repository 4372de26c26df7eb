"""A worker in a process of its own, for the tests that kill or signal it:
`python worker_process.py URL TOKEN QUEUE TRANSPORT GRACE`. Its handler
`hang` prints `started ID` and waits forever; `slow` prints it, waits a
second and returns. It exits when SIGTERM's graceful shutdown is done."""

from __future__ import annotations

import asyncio
import sys

import rdq


def main() -> None:
    url, token, queue, transport, grace = sys.argv[1:6]

    async def run() -> None:
        async with rdq.AsyncClient(url, token=token) as client:
            worker = rdq.Worker(
                client,
                queues=[queue],
                transport="grpc" if transport == "grpc" else "http",
                shutdown_grace=float(grace),
            )

            @worker.handler("hang")
            async def hang(ctx: rdq.TaskContext) -> None:
                print("started", ctx.id, flush=True)
                await asyncio.Event().wait()

            @worker.handler("slow")
            def slow(ctx: rdq.TaskContext) -> None:
                print("started", ctx.id, flush=True)
                ctx.cancelled_event.wait(1.0)

            await worker.run()
        print("stopped", flush=True)

    asyncio.run(run())


if __name__ == "__main__":
    main()
