"""Reading and following the job event feed (jobrail.events.feed)."""

import asyncio
import contextlib
import contextvars
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence

from jobrail.events.feed import START, EventCursor, EventFilter, JobEvent, JobEventLog, StoryLine
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import JobId, TenantId

MAX_PAGE = 500


class JobEvents:
    """A page of the feed, or the feed followed as it grows.

    Following reads a stream's events once the feed's tip (its last readable event, of
    any tenant) has passed the stream's cursor. One task per process watches the tip,
    an indexed one-row query every `poll_interval_s` while any stream is open, so open
    streams cost no query while nothing happens; a page at a time while one catches
    up. An event wakes every stream of its tenant at once: at most `max_reads` of them
    read at a time (the others wait their turn), so that a burst of streams does not
    hold every connection of the database pool the process's other requests use."""

    def __init__(
        self,
        log: JobEventLog,
        *,
        poll_interval_s: float,
        max_streams_per_tenant: int = 20,
        max_reads: int = 4,
    ) -> None:
        self._log = log
        self._max_streams = max_streams_per_tenant
        self._reads = asyncio.Semaphore(max_reads)
        self._streams: Counter[str] = Counter()
        self._tip = _TipWatch(log, poll_interval_s)

    @contextlib.contextmanager
    def stream_slot(self, tenant: TenantId) -> Iterator[bool]:
        """Hold one of the tenant's open streams (in this process) while the block runs;
        yields False, holding nothing, when it has `max_streams_per_tenant` already:
        each open stream holds a response open and reads whenever the feed moves."""
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

    def end_streams(self) -> None:
        """End every stream that follows the feed, now and from now on, after what it
        has read (the server is stopping: its clients reconnect with their place and
        resume). Otherwise a server that stops waits for their clients to leave, which
        an EventSource never does."""
        self._tip.end()

    async def close(self) -> None:
        """Stop the watch of the tip (the process is stopping)."""
        await self._tip.close()

    @property
    def max_streams_per_tenant(self) -> int:
        return self._max_streams

    async def page(self, which: EventFilter, limit: int) -> Sequence[JobEvent]:
        return await self._log.read(which, min(limit, MAX_PAGE))

    async def story(self, which: EventFilter, limit: int) -> Sequence[StoryLine]:
        """A page of the story of the job `which.job_id`: its events with their progress
        folded (jobrail.events.feed.StoryLine), as the ops page shows them. A page ends at
        an event the feed hands out, so reading on after its last line's id misses
        nothing."""
        return await self._log.story(which, min(limit, MAX_PAGE))

    async def head(self) -> EventCursor:
        return await self._log.head()

    async def refuse_unreached(self, after: EventCursor) -> None:
        """Refuse a cursor past the feed's head: no event had it, so the API never gave
        it out, and a stream after it would wait silently for the feed to pass it (then
        skip everything before). An empty feed (a new database, or one whose events were
        all pruned) has no head to compare with: any cursor is taken, as before."""
        head = await self._log.head()
        if head != START and after > head:
            raise InvalidInputError(
                f"event id {after} is past the feed's last event: it was never given out "
                "(take one from an event's id)"
            )

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
        loop = asyncio.get_running_loop()
        heartbeat_at = loop.time() + heartbeat_s
        while True:
            async with self._reads:
                readable = self._tip.current  # every event up to it can be read by now
                events = await self._log.read(dataclasses.replace(scan, after=after), MAX_PAGE)
            matched = [e for e in events if _matches(which, e)]
            for event in matched:
                yield event
            if events:
                after = events[-1].cursor
            if matched:
                heartbeat_at = loop.time() + heartbeat_s
                if until_ended and matched[-1].ends_job and matched[-1] is events[-1]:
                    return
            if len(events) == MAX_PAGE:
                continue
            if self._tip.ended:
                return
            # Nothing more of this stream's up to the tip seen before the read (other
            # tenants' events moved it): wait for the tip to pass both.
            seen = after if readable is None else max(after, readable)
            while not await self._tip.passed(seen, heartbeat_at - loop.time()):
                heartbeat_at = loop.time() + heartbeat_s
                yield after


def _matches(which: EventFilter, event: JobEvent) -> bool:
    if which.job_type is not None and event.job_type != which.job_type:
        return False
    return which.since is None or event.at >= which.since


class _TipWatch:
    """The feed's tip, read by one task every `interval` while anyone waits for it to
    pass a cursor (and stopped when nobody does). A failed read fails the waiters of
    the moment (their streams end, and their clients resume) and stops the task; the
    next waiter starts it again."""

    def __init__(self, log: JobEventLog, interval: float) -> None:
        self._log = log
        self._interval = interval
        self._tip: EventCursor | None = None
        self._waiters = 0
        self._task: asyncio.Task[None] | None = None
        self._moved: asyncio.Future[None] | None = None
        self._ended = False

    @property
    def ended(self) -> bool:
        """No stream waits for the tip any more (`end`)."""
        return self._ended

    def end(self) -> None:
        """Wake every stream waiting now, and let none wait from now on."""
        self._ended = True
        self._wake(None)

    @property
    def current(self) -> EventCursor | None:
        """The tip as last read (None: not being watched)."""
        return self._tip

    async def passed(self, cursor: EventCursor, timeout: float) -> bool:
        """Whether the tip passes `cursor` within `timeout` seconds (False: it has not),
        or the watch is ended (True at once: the stream reads what is left and ends)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._waiters += 1
        try:
            while not self._ended and (self._tip is None or self._tip <= cursor):
                if self._task is None or self._task.done():
                    # A context of its own: not that of the request that happened to start it.
                    self._task = loop.create_task(self._watch(), context=contextvars.Context())
                if self._moved is None or self._moved.done():
                    self._moved = loop.create_future()
                left = deadline - loop.time()
                if left <= 0:
                    return False
                moved = self._moved
                # asyncio.wait neither cancels `moved` (the other streams wait on it too)
                # nor raises on its timeout; a failed watch is raised here, by result().
                await asyncio.wait({moved}, timeout=left)
                if moved.done():
                    moved.result()
            return True
        finally:
            self._waiters -= 1

    async def _watch(self) -> None:
        while self._waiters:
            try:
                tip = await self._log.tip()
            except Exception as exc:  # noqa: BLE001 - handed to the streams waiting now
                self._tip = None
                self._wake(exc)
                return
            if self._tip is None or tip > self._tip:
                self._tip = tip
                self._wake(None)
            await asyncio.sleep(self._interval)
        self._tip = None  # nobody follows: it goes stale; the next watch reads it anew

    def _wake(self, error: BaseException | None) -> None:
        moved, self._moved = self._moved, None
        if moved is None or moved.done():
            return
        if error is None:
            moved.set_result(None)
        else:
            moved.set_exception(error)
            # Said to the streams waiting now; if their clients all left meanwhile,
            # nobody is left to hear it, and that is no error of its own.
            moved.exception()

    async def close(self) -> None:
        """Stop watching (the process is stopping)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
