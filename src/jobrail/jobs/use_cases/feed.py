"""Reading and following the job event feed (jobrail.jobs.feed)."""

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence

from jobrail.jobs.feed import EventCursor, EventFilter, JobEvent, JobEventLog
from jobrail.kernel.ids import TenantId

MAX_PAGE = 500


class JobEvents:
    """A page of the feed, or the feed followed as it grows.

    Following polls the log every `poll_interval_s` (one indexed query per open stream;
    a page at a time while it catches up)."""

    def __init__(
        self, log: JobEventLog, *, poll_interval_s: float, max_streams_per_tenant: int = 20
    ) -> None:
        self._log = log
        self._interval = poll_interval_s
        self._max_streams = max_streams_per_tenant
        self._streams: Counter[str] = Counter()

    @contextlib.contextmanager
    def stream_slot(self, tenant: TenantId) -> Iterator[bool]:
        """Hold one of the tenant's open streams (in this process) while the block runs;
        yields False, holding nothing, when it has `max_streams_per_tenant` already:
        each open stream costs a query per poll."""
        if self._streams[tenant] >= self._max_streams:
            yield False
            return
        self._streams[tenant] += 1
        try:
            yield True
        finally:
            self._streams[tenant] -= 1
            if not self._streams[tenant]:
                del self._streams[tenant]

    @property
    def max_streams_per_tenant(self) -> int:
        return self._max_streams

    async def page(self, which: EventFilter, limit: int) -> Sequence[JobEvent]:
        return await self._log.read(which, min(limit, MAX_PAGE))

    async def head(self) -> EventCursor:
        return await self._log.head()

    async def follow(
        self, which: EventFilter, *, heartbeat_s: float, until_ended: bool = False
    ) -> AsyncIterator[JobEvent | None]:
        """Every event after `which.after`, then each new one as it is written; None
        after every `heartbeat_s` without one (a stream's keep-alive). With
        `until_ended`, it stops after an event that ends a job and is the last one so
        far (a job's own stream)."""
        after = which.after
        idle = 0.0
        while True:
            events = await self._log.read(dataclasses.replace(which, after=after), MAX_PAGE)
            for event in events:
                yield event
                after = event.cursor
            if events:
                idle = 0.0
                if len(events) == MAX_PAGE:
                    continue
                if until_ended and events[-1].ends_job:
                    return
            await asyncio.sleep(self._interval)
            idle += self._interval
            if idle >= heartbeat_s:
                idle = 0.0
                yield None
