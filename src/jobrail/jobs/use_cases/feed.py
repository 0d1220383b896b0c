"""Reading and following the job event feed (jobrail.jobs.feed)."""

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence

from jobrail.jobs.feed import START, EventCursor, EventFilter, JobEvent, JobEventLog
from jobrail.kernel.ids import JobId, TenantId

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

    async def start_at(self, which: EventFilter) -> EventCursor:
        """Where a stream of `which` without a cursor starts: just before its first
        event at or after `which.since`, or now (the head) without one or if there is
        none yet."""
        if which.since is not None:
            first = await self._log.read(dataclasses.replace(which, after=START), 1)
            if first:
                return EventCursor(first[0].cursor.tx, first[0].cursor.id - 1)
        return await self._log.head()

    async def last_of_job(self, job_id: JobId) -> JobEvent | None:
        """The job's last event written, whether or not the feed hands it out yet."""
        found = await self._log.of_job(job_id, 1)
        return found[-1] if found else None

    async def follow(
        self, which: EventFilter, *, heartbeat_s: float, until_ended: bool = False
    ) -> AsyncIterator[JobEvent | EventCursor]:
        """Every event of `which` after `which.after`, then each new one as it is
        written; after every `heartbeat_s` without one, the cursor read up to (a
        stream's keep-alive, which moves its client's place on past what it filtered
        out). With `until_ended`, it stops after an event that ends a job and is the
        last one so far (a job's own stream).

        The job type and `since` are filtered here, not by the query: the cursor moves
        on past every event read, so a stream that matches little never reads the same
        events again."""
        after = which.after
        scan = dataclasses.replace(which, job_type=None, since=None)
        idle = 0.0
        while True:
            events = await self._log.read(dataclasses.replace(scan, after=after), MAX_PAGE)
            matched = [e for e in events if _matches(which, e)]
            for event in matched:
                yield event
            if events:
                after = events[-1].cursor
            if matched:
                idle = 0.0
                if until_ended and matched[-1].ends_job and matched[-1] is events[-1]:
                    return
            if len(events) == MAX_PAGE:
                continue
            await asyncio.sleep(self._interval)
            idle += self._interval
            if idle >= heartbeat_s:
                idle = 0.0
                yield after


def _matches(which: EventFilter, event: JobEvent) -> bool:
    if which.job_type is not None and event.job_type != which.job_type:
        return False
    return which.since is None or event.at >= which.since
