"""One scheduler leads at a time: lock renewal, loss and takeover, on the memory limits
backend with virtual time (TTL 8 s: renewed every 2 s, trusted for 6 s)."""

from datetime import timedelta

import pytest

from jobrail.scheduler.leadership import Leadership
from tests.unit.scheduling_support import FlakyLimits, Timeline

TTL = timedelta(seconds=8)


@pytest.fixture
def timeline() -> Timeline:
    return Timeline()


@pytest.fixture
def backend(timeline: Timeline) -> FlakyLimits:
    return FlakyLimits(timeline)


def scheduler(name: str, backend: FlakyLimits, timeline: Timeline) -> Leadership:
    return Leadership(backend, name, TTL, monotonic=timeline.monotonic)


async def test_the_first_scheduler_to_ask_leads_and_the_others_stand_by(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b, c = (scheduler(n, backend, timeline) for n in "abc")

    assert await a.hold() is True
    assert await b.hold() is False
    assert await c.hold() is False
    assert (a.is_leader, b.is_leader, c.is_leader) == (True, False, False)
    assert a.fence is not None
    assert b.fence is None


async def test_a_leader_that_renews_its_lock_leads_long_past_the_ttl(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b = scheduler("a", backend, timeline), scheduler("b", backend, timeline)
    await a.hold()
    first_fence = a.fence

    for _ in range(20):  # 40 s, five times the TTL
        timeline.advance(a.next_check_in())
        assert await a.hold() is True
        assert await b.hold() is False

    assert a.fence == first_fence


async def test_a_leader_renews_only_when_a_quarter_of_the_ttl_has_passed(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a = scheduler("a", backend, timeline)
    await a.hold()

    timeline.advance(1.5)
    assert a.next_check_in() == pytest.approx(0.5)
    backend.down = True  # a renewal now would fail
    assert await a.hold() is True  # not due: no call

    timeline.advance(0.5)
    assert await a.hold() is False  # due, and Redis is away


async def test_a_dead_leader_is_replaced_once_its_lock_has_ended(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b = scheduler("a", backend, timeline), scheduler("b", backend, timeline)
    await a.hold()
    dead_fence = a.fence

    timeline.advance(7.9)  # a is killed: it renews no more
    assert await b.hold() is False
    timeline.advance(0.1)

    assert await b.hold() is True
    assert (b.fence or 0) > (dead_fence or 0) > 0


async def test_a_leader_that_cannot_renew_stops_firing_before_anyone_else_may_start(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b = scheduler("a", backend, timeline), scheduler("b", backend, timeline)
    await a.hold()

    timeline.advance(5.9)  # a's event loop stalls: no renewal since it acquired
    assert a.is_leader is True
    timeline.advance(0.1)

    # A quarter of the TTL before its lock can end, a no longer trusts it...
    assert a.is_leader is False
    # ...and nobody else may lead until the lock has ended: no overlap.
    assert await b.hold() is False
    timeline.advance(2.0)
    assert await b.hold() is True
    assert a.is_leader is False


async def test_a_stalled_leader_learns_at_its_next_renewal_that_it_lost_the_lock(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b = scheduler("a", backend, timeline), scheduler("b", backend, timeline)
    await a.hold()
    timeline.advance(9)
    await b.hold()

    assert await a.hold() is False
    assert a.fence is None
    assert b.is_leader is True


async def test_a_leader_that_resigns_hands_over_at_the_next_tick(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b = scheduler("a", backend, timeline), scheduler("b", backend, timeline)
    await a.hold()

    await a.resign()

    assert a.is_leader is False
    assert await b.hold() is True


async def test_without_redis_nobody_leads_and_the_leader_resumes_when_it_answers(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b = scheduler("a", backend, timeline), scheduler("b", backend, timeline)
    await a.hold()
    fence = a.fence

    backend.down = True
    timeline.advance(2)
    assert await a.hold() is False
    assert await b.hold() is False
    assert a.is_leader is False

    backend.down = False
    timeline.advance(1)  # a's lock is still live in Redis: a keeps it
    assert await b.hold() is False
    assert await a.hold() is True
    assert a.fence == fence


async def test_a_lock_that_ended_while_redis_was_away_goes_to_whoever_asks_first(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a, b = scheduler("a", backend, timeline), scheduler("b", backend, timeline)
    await a.hold()
    backend.down = True
    await a.hold()
    timeline.advance(10)
    backend.down = False

    assert await b.hold() is True
    assert await a.hold() is False


async def test_a_scheduler_that_cannot_reach_redis_resigns_without_raising(
    backend: FlakyLimits, timeline: Timeline
) -> None:
    a = scheduler("a", backend, timeline)
    await a.hold()
    backend.down = True

    await a.resign()

    assert a.is_leader is False
