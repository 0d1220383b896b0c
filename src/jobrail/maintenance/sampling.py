"""Sampling the overview: once a minute, housekeeping writes what the console's charts
and counts read (jobrail.maintenance.sample), so that every API replica reads the same
few rows instead of the jobs table."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.kernel.clock import Clock
from jobrail.maintenance.ports import OverviewSampleStore
from jobrail.maintenance.sample import (
    MINUTE,
    WAITING,
    Sample,
    floor_minute,
    minute_samples,
)

CATCH_UP = timedelta(hours=1)
"""After a pause of the schedule, the minutes sampled again at most (the charts' window)."""
KEEP = timedelta(days=1)


async def sample_minutes(
    store: OverviewSampleStore, first: datetime, last: datetime
) -> list[Sample]:
    """The samples of each minute from `first` to `last` (both included), from the jobs
    finished and started in it: two index-bounded reads per minute."""
    samples: list[Sample] = []
    minute = first
    while minute <= last:
        end = minute + MINUTE
        finished = await store.finished_in(minute, end)
        delays = await store.start_delays(minute, end)
        samples.extend(minute_samples(minute, finished, delays))
        minute = end
    return samples


@dataclass(frozen=True, slots=True)
class Sampled:
    minutes: int
    deleted: int


class SampleOverview:
    """Write the overview's samples up to the current minute.

    - Each run samples again from the newest minute sampled before (it may have been
      sampled while it was still going on) to the current one; after a pause, at most
      the last hour. Running twice, or on two workers at once, writes the same rows.
    - The queue depths are sampled for the current minute only: the past ones cannot be
      read again.
    - Samples older than a day are deleted.
    """

    def __init__(self, store: OverviewSampleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def __call__(self) -> Sampled:
        current = floor_minute(self._clock.now())
        newest = await self._store.newest_minute()
        first = current - CATCH_UP if newest is None else max(newest, current - CATCH_UP)
        samples = await sample_minutes(self._store, first, current)
        waiting = await self._store.waiting_by_queue()
        samples.extend(Sample(WAITING, current, queue, n) for queue, n in waiting.items())
        await self._store.replace(first, current, samples)
        deleted = await self._store.delete_before(current - KEEP)
        return Sampled(minutes=int((current - first) / MINUTE) + 1, deleted=deleted)
