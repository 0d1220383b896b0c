"""A token bucket's rate after the limits store lost its data, measured by the handlers.

The scenario: a backlog of vendor calls limited by one token bucket (capacity + rate),
most of them deferred holding a reserved token, then the store loses everything
(``lose_data``: this test's keys deleted, or a real Redis restart without persistence)
and more calls are enqueued. From then on the fresh bucket alone decides: in no second
may more calls start than capacity + rate. (Before jobrail checked a reservation
against the bucket state that made it, the fresh bucket's burst and rate came on top
of the old reservations, which were honoured blindly: about 28 calls in the first
second for a ceiling of 20.)

Only this test's calls are counted: they reach this test's own recorder. Each is timed
by when its handler started (the ``sent`` parameter the job sends), not by when it
reached the recorder: the HTTP request on a loaded machine arrives anything from a few
to hundreds of milliseconds later, enough to put 21 starts spread over 1.1 s into one
second at the recorder.
"""

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs as jobs_table
from tests.support.fixtures import ApiClient
from tests.support.recorder import Call, Recorder
from tests.support.services import wait_for

CAPACITY, RATE = 10, 10.0
# Enqueued before the loss (most wait holding a reserved token), and after it (they
# find the fresh bucket full).
JOBS_BEFORE, JOBS_AFTER = 60, 40
# A handler starts some milliseconds after Redis admitted its call (the claim in
# Postgres comes in between). A window is shortened by this much so that spread in that
# delay is not counted as the bucket's doing: 50 ms is half a call at this rate, so one
# call too many in a second still fails.
SLACK_S = 0.05

WORKER_ENV = {
    "JOBRAIL_TEST_RATE": str(RATE),
    "JOBRAIL_TEST_BURST": str(CAPACITY),
    # A message published twice (fast path and relay) would reserve two tokens.
    "JOBRAIL_OUTBOX__RELAY_MIN_AGE_S": "2.0",
    "JOBRAIL_LIMITS__UNAVAILABLE_RETRY_MAX_S": "2",
}


@dataclass(frozen=True)
class Measured:
    before: int
    after: list[float]
    """When the handlers of the calls after the loss started (wall clock, ordered)."""
    busiest: int
    """The most handler starts after the loss in any window of one second (less the
    slack)."""


def busiest_second(times: list[float]) -> int:
    ordered = sorted(times)
    return max(
        (
            sum(1 for t in ordered[i:] if t < start + 1.0 - SLACK_S)
            for i, start in enumerate(ordered)
        ),
        default=0,
    )


async def run(
    api: ApiClient,
    workers: Callable[..., Awaitable[Any]],
    recorder: Recorder,
    engine: AsyncEngine,
    lose_data: Callable[[], Awaitable[None]],
) -> Measured:
    for n in range(2):
        await workers(f"worker-{n}", **WORKER_ENV)
    # Warm the workers' connections first (another tenant: another bucket).
    warm = [
        await api.enqueue("test.vendor_call", {"url": recorder.url, "n": -1}, "warm")
        for _ in range(5)
    ]
    await _all_succeeded(engine, warm, 60)
    recorder.calls.clear()

    ids = await _enqueue(api, recorder, range(JOBS_BEFORE))
    # The burst has gone and some reserved tokens have been used: most jobs are now
    # waiting for tokens the old bucket reserved for them.
    await wait_for(
        _async(lambda: len(recorder.calls) >= CAPACITY + 10),
        timeout=60,
        interval=0.05,
        what="the burst and the first reserved calls",
    )
    lost_at = time.time()
    await lose_data()
    ids += await _enqueue(api, recorder, range(JOBS_BEFORE, JOBS_BEFORE + JOBS_AFTER))
    await _all_succeeded(engine, ids, 120)

    calls = list(recorder.calls)
    assert len(calls) == JOBS_BEFORE + JOBS_AFTER
    # After the loss: the calls whose handler started after it, by that start (a call
    # reaches the recorder later, by however long a loaded machine takes).
    after = handler_starts(calls, since=lost_at)
    return Measured(before=len(calls) - len(after), after=after, busiest=busiest_second(after))


def handler_starts(calls: Iterable[Call], since: float) -> list[float]:
    """When the handlers of `calls` started (the ``sent`` they sent), from `since` on,
    in order."""
    return sorted(at for at in (float(call.params["sent"]) for call in calls) if at >= since)


async def _enqueue(api: ApiClient, recorder: Recorder, numbers: range) -> list[str]:
    return list(
        await asyncio.gather(
            *(api.enqueue("test.vendor_call", {"url": recorder.url, "n": n}) for n in numbers)
        )
    )


def per_second(times: list[float]) -> list[int]:
    """Calls in each whole second from the first (for the report)."""
    if not times:
        return []
    counts = [0] * (int(times[-1] - times[0]) + 1)
    for t in times:
        counts[int(t - times[0])] += 1
    return counts


async def _all_succeeded(engine: AsyncEngine, ids: list[str], timeout: float) -> None:
    wanted = [uuid.UUID(i) for i in ids]

    async def done() -> bool:
        async with engine.connect() as conn:
            succeeded = await conn.scalar(
                select(func.count())
                .select_from(jobs_table)
                .where(jobs_table.c.id.in_(wanted), jobs_table.c.status == "succeeded")
            )
        return succeeded == len(wanted)

    await wait_for(done, timeout=timeout, interval=0.2, what="all jobs to succeed")


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def predicate() -> bool:
        return check()

    return predicate
