"""A quiet queue costs its dispatcher little, on SQLite and Postgres alike: once a pass
finds nothing to do, the queue is passed over at doubling intervals, and one read for
every quiet queue (``DispatchStore.stirs``) looks for what would give it work (an
arrival, fast-path credit taken, a held job come due), which brings its pass back at
once. An idle worker's dispatcher took a third of a core before (a pass over each of
the four default queues every 20 ms)."""

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from jobrail.dispatch.use_cases import JobDispatcher
from jobrail.settings import DispatchSettings
from tests.fakes import NO_TYPES, START, FixedClock
from tests.support.dispatch_store import (
    QUEUE,
    CountingStore,
    ReadyCount,
    SentMessages,
    Subject,
    held,
)
from tests.support.services import wait_for

OTHER = "jobs.high"
BOTH = [QUEUE, OTHER]


async def test_stirs_says_what_moved_in_each_queue(subject: Subject) -> None:
    store = subject.store
    assert await store.stirs(BOTH, START, START) == (frozenset(), {}, frozenset())

    await store.gate(QUEUE, 2)
    await subject.add(held("a"))  # the fast path takes one of the credit
    assert await store.stirs(BOTH, START, START) == (
        frozenset(),
        {QUEUE: (1, False)},
        frozenset(),
    )

    await subject.add(held("a"))
    await subject.add(held("a"))  # the credit is spent: held, noted, the gate marked
    arrived, gates, _ = await store.stirs(BOTH, START, START)
    assert arrived == {QUEUE}
    credit, spent = gates[QUEUE]
    assert credit <= 0
    assert spent

    due_at = START + timedelta(seconds=10)
    await subject.add(held("b", queue=OTHER, run_after=due_at))
    later = due_at + timedelta(seconds=1)
    assert (await store.stirs(BOTH, START, due_at - timedelta(seconds=1)))[2] == frozenset()
    assert (await store.stirs(BOTH, START, later))[2] == {OTHER}
    assert (await store.stirs([QUEUE], START, later))[2] == frozenset()  # not asked about
    assert (await store.stirs(BOTH, due_at, later))[2] == frozenset()  # seen before


async def test_a_quiet_queue_is_passed_over_seldom_and_at_once_when_work_arrives(
    subject: Subject,
) -> None:
    store, sender = CountingStore(subject.engine), SentMessages()
    settings = DispatchSettings(enabled=True, ready_target=4, lease_s=60, quiet_interval_s=20)
    dispatcher = JobDispatcher(
        store, ReadyCount(0), sender, NO_TYPES, FixedClock(START), settings, [QUEUE, OTHER], "me"
    )
    stop = asyncio.Event()
    running = asyncio.create_task(dispatcher.run_forever(stop))
    try:
        began = time.monotonic()

        async def looked_often() -> bool:
            return store.looks >= 10

        await wait_for(looked_often, timeout=60, what="ten looks for what moved")
        idle_s = time.monotonic() - began
        # Every interval_s (0.02 s) that would have been a pass over each queue.
        assert max(store.passes.values()) <= 8, (store.passes, idle_s)

        # As after a long quiet: no pass is due for many seconds (white box: the test
        # would otherwise have to wait for the doubling intervals to grow that long).
        for q in dispatcher._queues:
            q.next_pass_at = time.monotonic() + 600
        passes = Counter(store.passes)
        jobs = [await subject.add(held("a")) for _ in range(6)]  # 4 fast, 2 held
        assert sum(job.held_since is not None for job in jobs) == 2

        async def released() -> bool:
            return len(sender.messages) == 2

        await wait_for(released, timeout=30, what="the held jobs' release")
        assert {m.job_id for m in sender.messages} == {j.id for j in jobs if j.held_since}
        assert store.passes[QUEUE] > passes[QUEUE]
        assert store.passes[OTHER] == passes[OTHER]  # nothing moved there: no pass
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


class FailingLooks(CountingStore):
    async def stirs(self, queues: Sequence[str], since: datetime, now: datetime) -> Any:
        self.looks += 1
        raise RuntimeError("a bug in the look")


async def test_a_look_that_fails_leaves_the_loop_passing(subject: Subject) -> None:
    store = FailingLooks(subject.engine)
    settings = DispatchSettings(enabled=True, ready_target=4, quiet_interval_s=0.2)
    dispatcher = JobDispatcher(
        store, ReadyCount(0), SentMessages(), NO_TYPES, FixedClock(START), settings, [QUEUE], "me"
    )
    stop = asyncio.Event()
    running = asyncio.create_task(dispatcher.run_forever(stop))
    try:

        async def went_on() -> bool:
            assert not running.done(), running
            return store.looks >= 3 and store.passes[QUEUE] >= 8

        await wait_for(went_on, timeout=60, what="passes after failed looks")
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


async def test_a_short_lease_is_not_refused_and_caps_the_quiet_interval(
    subject: Subject,
) -> None:
    """A lease shorter than three quiet intervals is not refused: a quiet queue is passed
    over at least three times a lease, whatever quiet_interval_s says."""
    settings = DispatchSettings(enabled=True, lease_s=1.5)  # quiet_interval_s: 1 s
    dispatcher = JobDispatcher(
        subject.store,
        ReadyCount(0),
        SentMessages(),
        NO_TYPES,
        FixedClock(START),
        settings,
        [QUEUE],
        "me",
    )
    queue = dispatcher._queues[0]
    queue.quiet, queue.quiet_passes = True, 20
    began = time.monotonic()
    dispatcher._pace(queue)
    assert queue.next_pass_at - began <= 0.5 + 0.05
