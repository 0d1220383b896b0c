"""Coalescing: calls made in the same event-loop turn travel together.

A worker runs dozens of jobs at once, and each makes the same few calls (admit,
claim, record, release). Sending every call on its own costs a write, a read and
a client's bookkeeping each; a ``Coalescer`` collects the calls made before the loop
turns over and hands them to ``flush`` as one batch. Each caller still gets its own
result (or its own exception).

A window trades a little latency for a lot of throughput: with a worker's calls
arriving a few hundred microseconds apart, a 1 ms window turns a dozen round trips
into one (bench/README.md has the figures). The API uses no window.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Request = TypeVar("Request")
Result = TypeVar("Result")


class Coalescer(Generic[Request, Result]):
    def __init__(
        self,
        flush: Callable[[Sequence[Request]], Awaitable[Sequence[Result | BaseException]]],
        window_s: float = 0.0,
        max_batch: int = 256,
    ) -> None:
        self._flush = flush
        self._window_s = window_s
        self._max_batch = max_batch
        self._pending: list[tuple[Request, asyncio.Future[Result]]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, request: Request) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((request, future))
        if len(self._pending) >= self._max_batch:
            self._send()
        elif not self._scheduled:
            self._scheduled = True
            if self._window_s > 0:
                loop.call_later(self._window_s, self._send)
            else:
                loop.call_soon(self._send)
        return await future

    def _send(self) -> None:
        self._scheduled = False
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.ensure_future(self._deliver(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, batch: list[tuple[Request, asyncio.Future[Result]]]) -> None:
        try:
            results = await self._flush([request for request, _ in batch])
        except BaseException as exc:  # every caller learns what went wrong
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
