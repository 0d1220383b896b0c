"""The Coalescer: calls of one loop turn travel together; its window is waited only
while an earlier batch is on its way, so a lone call pays none."""

import asyncio
from collections.abc import Sequence

from jobrail.kernel.batching import Coalescer


class Flushes:
    """A flush that notes each batch and, while `hold` is clear, keeps it waiting."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def __call__(self, requests: Sequence[int]) -> list[int]:
        self.batches.append(list(requests))
        await self.hold.wait()
        return [r * 10 for r in requests]


async def test_calls_of_one_turn_travel_together_without_a_window() -> None:
    flushes = Flushes()
    coalescer: Coalescer[int, int] = Coalescer(flushes)

    assert await asyncio.gather(*(coalescer.submit(n) for n in (1, 2, 3))) == [10, 20, 30]
    assert flushes.batches == [[1, 2, 3]]


async def test_a_lone_call_to_an_idle_coalescer_does_not_wait_for_the_window() -> None:
    flushes = Flushes()
    coalescer: Coalescer[int, int] = Coalescer(flushes, window_s=3600)

    assert await asyncio.wait_for(coalescer.submit(1), 5) == 10
    assert flushes.batches == [[1]]


async def test_while_a_batch_is_on_its_way_the_next_calls_wait_the_window_together() -> None:
    flushes = Flushes()
    coalescer: Coalescer[int, int] = Coalescer(flushes, window_s=0.05)
    flushes.hold.clear()
    first = asyncio.ensure_future(coalescer.submit(1))
    while not flushes.batches:
        await asyncio.sleep(0)

    later = [asyncio.ensure_future(coalescer.submit(n)) for n in (2, 3)]
    await asyncio.sleep(0)
    more = asyncio.ensure_future(coalescer.submit(4))  # a later turn, within the window
    flushes.hold.set()

    assert await asyncio.gather(first, *later, more) == [10, 20, 30, 40]
    assert flushes.batches == [[1], [2, 3, 4]]
