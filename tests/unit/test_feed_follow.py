"""Following the job event feed: open streams cost no query while nothing happens (one
watch of the feed's tip serves them all), and each still gets every event of its own
once one is written, and a keep-alive while there is none."""

import asyncio
import gc
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from jobrail.events.feed import START, EventCursor, EventFilter, JobEvent
from jobrail.events.use_cases import JobEvents
from jobrail.jobs.domain import JobStatus
from jobrail.kernel.errors import StoreUnavailableError
from jobrail.kernel.ids import JobId, TenantId

INTERVAL = 0.02


class CountingLog:
    """An event log in memory that counts what it is asked."""

    def __init__(self) -> None:
        self.events: list[JobEvent] = []
        self.reads = 0
        self.tips = 0
        self.down = False
        self.slow_s = 0.0
        self.reading = 0  # reads under way now
        self.most_reading = 0

    def write(self, tenant: str, name: str = "enqueued") -> JobEvent:
        event = JobEvent(
            cursor=EventCursor(0, len(self.events) + 1),
            name=name,
            tenant_id=TenantId(tenant),
            job_id=JobId(uuid.uuid4()),
            job_type="demo.echo",
            at=datetime.now(UTC),
            status=JobStatus.PENDING,
            attempts=0,
            last_error=None,
            run_after=None,
            progress=None,
            waiting=None,
            flow_id=None,
        )
        self.events.append(event)
        return event

    async def read(self, which: EventFilter, limit: int) -> Sequence[JobEvent]:
        self.reads += 1
        self.reading += 1
        self.most_reading = max(self.most_reading, self.reading)
        try:
            await asyncio.sleep(0.001)  # as a query would: a stream reading in a loop shows
        finally:
            self.reading -= 1
        return [
            e
            for e in self.events
            if e.cursor > which.after and which.tenant_id in (None, e.tenant_id)
        ][:limit]

    async def tip(self) -> EventCursor:
        self.tips += 1
        if self.down:
            await asyncio.sleep(self.slow_s)
            raise StoreUnavailableError("the database is away")
        return self.events[-1].cursor if self.events else START

    async def head(self) -> EventCursor:
        return await self.tip()

    async def of_job(self, job_id: JobId, limit: int) -> Sequence[JobEvent]:
        return []


async def _follow(feed: JobEvents, tenant: str, got: list[object], heartbeat_s: float) -> None:
    async for item in feed.follow(EventFilter(TenantId(tenant)), heartbeat_s=heartbeat_s):
        got.append(item)


async def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_idle_streams_make_no_query_but_one_watch_of_the_tip() -> None:
    log = CountingLog()
    feed = JobEvents(log, poll_interval_s=INTERVAL)
    received: list[list[object]] = [[] for _ in range(10)]
    started = time.monotonic()
    streams = [
        asyncio.create_task(_follow(feed, f"t{n % 2}", got, heartbeat_s=60))
        for n, got in enumerate(received)
    ]
    try:
        await asyncio.sleep(10 * INTERVAL)
        assert log.reads == 10  # each stream's first read, and no other
        # One watcher, which sleeps a whole interval between its reads: however slow
        # the machine, never more than this.
        assert log.tips <= (time.monotonic() - started) / INTERVAL + 1

        event = log.write("t0")
        await _until(lambda: all(got for got in received[0::2]))
        assert all(got == [event] for got in received[0::2])
        await asyncio.sleep(3 * INTERVAL)
        assert all(got == [] for got in received[1::2])  # another tenant's event
        assert log.reads == 20  # the tip moved: each stream read once more
    finally:
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)


async def test_streams_woken_together_read_a_few_at_a_time() -> None:
    # One event wakes every stream of its tenant at once: their reads take turns, so
    # that they never hold more than `max_reads` of the database pool's connections.
    log = CountingLog()
    feed = JobEvents(log, poll_interval_s=INTERVAL, max_reads=3)
    received: list[list[object]] = [[] for _ in range(12)]
    streams = [asyncio.create_task(_follow(feed, "t0", got, heartbeat_s=60)) for got in received]
    try:
        await _until(lambda: log.reads >= 12)
        event = log.write("t0")
        await _until(lambda: all(got for got in received))

        assert all(got == [event] for got in received)
        assert log.most_reading == 3
    finally:
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)


async def test_a_stream_gets_a_keep_alive_with_its_place_while_nothing_comes() -> None:
    log = CountingLog()
    first = log.write("t0")
    feed = JobEvents(log, poll_interval_s=INTERVAL)
    got: list[object] = []
    stream = asyncio.create_task(_follow(feed, "t0", got, heartbeat_s=3 * INTERVAL))
    try:
        await _until(lambda: len(got) >= 3)
        assert got[0] == first
        assert got[1:3] == [first.cursor, first.cursor]  # keep-alives, at its place
    finally:
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)


async def test_a_tip_not_read_ends_the_streams_waiting_and_the_next_starts_anew() -> None:
    log = CountingLog()
    feed = JobEvents(log, poll_interval_s=INTERVAL)
    log.down = True
    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(_follow(feed, "t0", [], heartbeat_s=60), 10)

    log.down = False
    event = log.write("t0")
    got: list[object] = []
    stream = asyncio.create_task(_follow(feed, "t0", got, heartbeat_s=60))
    try:
        await _until(lambda: got)
        later = log.write("t0")
        await _until(lambda: len(got) == 2)
        assert got == [event, later]
    finally:
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)


async def test_a_failed_watch_whose_streams_all_left_is_no_error_and_close_stops_it() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    log = CountingLog()
    log.down, log.slow_s = True, 5 * INTERVAL
    feed = JobEvents(log, poll_interval_s=INTERVAL)
    stream = asyncio.create_task(_follow(feed, "t0", [], heartbeat_s=60))
    await _until(lambda: log.tips == 1)  # the watch is reading the tip, slowly
    stream.cancel()  # its client left
    await asyncio.gather(stream, return_exceptions=True)
    del stream  # and its request is gone
    await asyncio.sleep(10 * INTERVAL)  # the read fails, with nobody waiting
    gc.collect()
    assert reported == []

    log.down = False
    again = asyncio.create_task(_follow(feed, "t0", [], heartbeat_s=60))
    await _until(lambda: log.tips >= 3)  # watched again
    await feed.close()
    tips = log.tips
    await asyncio.sleep(5 * INTERVAL)
    assert log.tips == tips  # stopped, though a stream still waits
    again.cancel()
    await asyncio.gather(again, return_exceptions=True)


async def test_ending_the_streams_ends_those_open_and_those_that_open_later() -> None:
    # The server is stopping: a stream that waited for the feed ends (after what it
    # read), so that its connection closes; an EventSource reconnects with its place.
    log = CountingLog()
    first = log.write("t0")
    feed = JobEvents(log, poll_interval_s=INTERVAL)
    got: list[object] = []
    stream = asyncio.create_task(_follow(feed, "t0", got, heartbeat_s=60))
    try:
        await _until(lambda: got == [first])
        later = log.write("t0")  # written, not yet seen by the stream's watch
        feed.end_streams()
        await asyncio.wait_for(stream, 10)
        assert got in ([first], [first, later])  # nothing lost: the client resumes

        opened_after: list[object] = []
        await asyncio.wait_for(_follow(feed, "t0", opened_after, heartbeat_s=60), 10)
        assert opened_after == [first, later]  # its one read, then it ends
    finally:
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)
