"""Limit semantics, on the memory backend with a virtual clock (milliseconds)."""

import asyncio
import heapq
from datetime import timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jobrail.limits import kind
from jobrail.limits.kinds.token_bucket import START_TOLERANCE_MS
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import (
    Acquire,
    Concurrency,
    JobLimits,
    KeyTemplate,
    Lock,
    SlidingWindow,
    TokenBucket,
)

BUCKET = TokenBucket("vendor", key="vendor:{tenant_id}", capacity=3, per_second=2)
WINDOW = SlidingWindow("api", key="t", limit=2, window_s=10)
SLOTS = Concurrency("conns", key="c", slots=2, lease_s=5)
LOCK = Lock(key="account:{account_id}", ttl_s=1)


def one(limit: object, key: str = "k") -> list[Acquire]:
    return [Acquire(limit, key)]  # type: ignore[arg-type]


def paid(limit: TokenBucket, reservation: str, key: str = "k") -> list[Acquire]:
    return [Acquire(limit, key, prepaid=reservation)]


async def test_a_bucket_allows_its_burst_then_says_exactly_when_the_next_token_comes() -> None:
    limits = MemoryLimits()
    decisions = [(await limits.admit(one(BUCKET), f"h{i}", now_ms=0)) for i in range(4)]

    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.decisions[0].remaining for d in decisions[:3]] == [2, 1, 0]
    assert decisions[3].retry_after == timedelta(milliseconds=500)
    assert (await limits.admit(one(BUCKET), "h5", now_ms=499)).allowed is False
    assert (await limits.admit(one(BUCKET), "h6", now_ms=500)).allowed is True


async def test_a_refund_gives_the_token_back() -> None:
    limits = MemoryLimits()
    grants = [(await limits.admit(one(BUCKET), f"h{i}", now_ms=0)).grant for i in range(3)]
    assert grants[-1] is not None

    await limits.release(grants[-1], refund=True)

    assert (await limits.admit(one(BUCKET), "again", now_ms=0)).allowed


async def test_a_token_charged_before_others_is_not_refunded() -> None:
    """Given back after later tokens were charged, it would hand the bucket's next token
    the time of one given out already, and the two jobs would start together."""
    limits = MemoryLimits()
    grants = [(await limits.admit(one(BUCKET), f"h{i}", now_ms=0)).grant for i in range(3)]
    assert grants[0] is not None

    await limits.release(grants[0], refund=True)

    assert not (await limits.admit(one(BUCKET), "again", now_ms=0)).allowed


async def test_a_reserved_token_is_honoured_until_its_time_then_the_job_competes_again() -> None:
    limits = MemoryLimits()
    for i in range(3):
        await limits.admit(one(BUCKET), f"h{i}", now_ms=0)
    [first] = (await limits.admit(one(BUCKET), "w1", reserve=True, now_ms=0)).decisions
    for n in range(3):  # jobs waiting behind it
        await limits.admit(one(BUCKET), f"w{n + 2}", reserve=True, now_ms=0)
    assert first.reserved
    assert first.epoch is not None
    assert first.until is not None
    reservation = kind.reservation(first.epoch, first.until)
    due = first.retry_after_s * 1000

    early = await limits.admit(paid(BUCKET, reservation), "early", reserve=True, now_ms=due - 1)
    on_time = await limits.admit(paid(BUCKET, reservation), "on-time", now_ms=due)
    late = await limits.admit(
        paid(BUCKET, reservation), "late", reserve=True, now_ms=first.until + 1
    )

    # Brought back before its token is due (another clock's "due"), it waits, keeping it.
    assert not early.allowed
    assert early.decisions[0].reserved
    assert early.decisions[0].until == first.until
    assert early.decisions[0].retry_after_s == pytest.approx(0.001)
    assert on_time.allowed
    assert on_time.decisions[0].until == first.until
    # Its token's time has gone: it waits behind the others for a token of its own.
    assert not late.allowed
    assert late.decisions[0].reserved
    assert late.decisions[0].until != first.until


async def test_an_admission_says_by_when_its_work_must_start() -> None:
    limits = MemoryLimits()
    first = await limits.admit(one(BUCKET), "h0", now_ms=0)
    second = await limits.admit(one(BUCKET), "h1", now_ms=0)

    # A full bucket's first token has no room but the tolerance; the next one the
    # interval the bucket was ahead by then.
    assert first.start_within == timedelta(milliseconds=START_TOLERANCE_MS)
    assert second.start_within == timedelta(milliseconds=500 + START_TOLERANCE_MS)
    assert (await limits.admit(one(WINDOW), "w", now_ms=0)).start_within is None


async def test_a_prepaid_token_is_not_refunded() -> None:
    """It was charged when it was reserved, before the tokens reserved after it."""
    limits = MemoryLimits()
    for i in range(3):
        await limits.admit(one(BUCKET), f"h{i}", now_ms=0)
    [first] = (await limits.admit(one(BUCKET), "w1", reserve=True, now_ms=0)).decisions
    await limits.admit(one(BUCKET), "w2", reserve=True, now_ms=0)
    assert first.epoch is not None
    due = first.retry_after_s * 1000
    back = await limits.admit(
        paid(BUCKET, kind.reservation(first.epoch, first.until)), "w1-back", now_ms=due
    )
    assert back.grant is not None

    await limits.release(back.grant, refund=True)

    # Not given back: at w2's token's time, there is no second token.
    assert not (await limits.admit(one(BUCKET), "third", now_ms=due + 500)).allowed


async def test_a_sliding_window_counts_acquires_in_the_last_window() -> None:
    limits = MemoryLimits()
    assert (await limits.admit(one(WINDOW), "a", now_ms=0)).allowed
    assert (await limits.admit(one(WINDOW), "b", now_ms=4000)).allowed

    denied = await limits.admit(one(WINDOW), "c", now_ms=9000)

    assert not denied.allowed
    assert denied.retry_after == timedelta(seconds=1)
    assert (await limits.admit(one(WINDOW), "d", now_ms=10_001)).allowed


async def test_a_slot_held_by_a_dead_worker_frees_itself_when_its_lease_ends() -> None:
    limits = MemoryLimits()
    assert (await limits.admit(one(SLOTS), "a", now_ms=0)).allowed
    assert (await limits.admit(one(SLOTS), "b", now_ms=1000)).allowed

    full = await limits.admit(one(SLOTS), "c", now_ms=2000)
    assert not full.allowed
    assert full.retry_after == timedelta(seconds=3)
    assert (await limits.admit(one(SLOTS), "d", now_ms=5000)).allowed


async def test_released_slots_are_free_at_once() -> None:
    limits = MemoryLimits()
    grant = (await limits.admit(one(SLOTS), "a", now_ms=0)).grant
    await limits.admit(one(SLOTS), "b", now_ms=0)
    assert grant is not None

    await limits.release(grant)

    assert (await limits.admit(one(SLOTS), "c", now_ms=1)).allowed


async def test_a_lock_has_one_holder_and_a_fence_that_only_grows() -> None:
    limits = MemoryLimits()
    first = await limits.admit(one(LOCK), "a", now_ms=1000)
    busy = await limits.admit(one(LOCK), "b", now_ms=1500)
    after_expiry = await limits.admit(one(LOCK), "c", now_ms=2000)

    assert first.allowed
    assert not busy.allowed
    assert after_expiry.allowed
    assert busy.retry_after == timedelta(milliseconds=500)
    assert first.grant
    assert after_expiry.grant
    assert first.grant.fence is not None
    assert after_expiry.grant.fence is not None
    assert after_expiry.grant.fence > first.grant.fence


async def test_a_lock_s_denial_names_who_holds_it_and_nothing_else_does() -> None:
    limits = MemoryLimits()
    first = await limits.admit([*one(LOCK), *one(SLOTS, "c")], "job-1/a", now_ms=0)
    busy = await limits.admit([*one(LOCK), *one(SLOTS, "c")], "job-2/b", now_ms=10)
    later = await limits.admit(one(LOCK), "job-3/c", now_ms=5000)  # its TTL has passed

    assert [d.holder for d in first.decisions] == [None, None]
    assert [d.holder for d in busy.decisions] == ["job-1/a", None]
    assert later.decisions[0].holder is None


async def test_only_the_holder_can_extend_or_release_a_lock() -> None:
    limits = MemoryLimits()
    old = (await limits.admit(one(LOCK), "a", now_ms=0)).grant
    new = (await limits.admit(one(LOCK), "b", now_ms=1000)).grant
    assert old
    assert new

    assert not await limits.extend(old, now_ms=1100)
    await limits.release(old)
    assert not (await limits.admit(one(LOCK), "c", now_ms=1200)).allowed
    assert await limits.extend(new, now_ms=1500)
    assert not (await limits.admit(one(LOCK), "c", now_ms=2200)).allowed  # extended to 2500


async def test_admission_is_all_or_nothing() -> None:
    limits = MemoryLimits()
    await limits.admit(one(LOCK, "x"), "holder", now_ms=0)

    denied = await limits.admit([Acquire(BUCKET, "v"), Acquire(LOCK, "x")], "job", now_ms=0)

    assert not denied.allowed
    assert denied.denied_by == ["lock"]
    after = await limits.peek(Acquire(BUCKET, "v"), now_ms=0)
    assert after.remaining == 2  # the bucket was not spent


async def test_a_fenced_write_from_an_older_holder_is_refused() -> None:
    limits = MemoryLimits()

    assert await limits.fenced_write("account:1", 5, "new")
    assert not await limits.fenced_write("account:1", 4, "stale")
    assert limits.fenced_value("account:1") == (5, "new")


def test_templates_render_from_payload_fields() -> None:
    assert (
        KeyTemplate("vendor:{tenant_id}:{region}").render(
            {"tenant_id": "acme", "region": "eu", "other": 1}
        )
        == "vendor:acme:eu"
    )


def test_a_template_naming_a_missing_field_is_refused_with_the_task_and_field() -> None:
    declared = JobLimits(limits=[BUCKET], lock=LOCK)

    with pytest.raises(ValueError, match=r"'sync\.account'.*'account_id'"):
        declared.check_fields("sync.account", ["tenant_id", "region"])


@pytest.mark.parametrize(
    "bad",
    [
        lambda: TokenBucket("x", key="k", capacity=0, per_second=1),
        lambda: TokenBucket("x", key="k", capacity=1, per_second=1, cost=2),
        lambda: SlidingWindow("x", key="k", limit=0, window_s=1),
        lambda: Concurrency("x", key="k", slots=0),
        lambda: Lock(key="k", ttl_s=0),
        lambda: KeyTemplate("{a!r}"),
    ],
)
def test_nonsense_declarations_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        bad()  # type: ignore[operator]


async def test_reset_forgets_only_the_limit_of_its_kind() -> None:
    limits = MemoryLimits()
    bucket = TokenBucket("v", key="vendor", capacity=1, per_second=0.001)
    slots = Concurrency("c", key="vendor", slots=1)
    await limits.admit([Acquire(bucket, "vendor"), Acquire(slots, "vendor")], "h", now_ms=0)

    await limits.reset(Acquire(bucket, "vendor"))

    assert (await limits.peek(Acquire(bucket, "vendor"), now_ms=1)).allowed
    assert not (await limits.peek(Acquire(slots, "vendor"), now_ms=1)).allowed


async def test_expired_state_is_forgotten_so_memory_stays_bounded() -> None:
    limits = MemoryLimits()
    for n in range(2048):
        await limits.admit([Acquire(WINDOW, f"ip-{n}")], f"h{n}", now_ms=n)

    await limits.admit([Acquire(WINDOW, "late")], "x", now_ms=10**9)
    for n in range(2048):
        await limits.admit([Acquire(LOCK, "same")], f"y{n}", now_ms=10**9 + 10**6 * n)

    assert len(limits._states[SlidingWindow]) < 1100


async def _run_jobs(arrivals: list[float], loss_at: float) -> tuple[list[float], list[float]]:
    """Jobs arrive at `arrivals` (ms) and do what the runner does: a job turned away
    comes back when told, with the reservation it was given. All data is lost at
    `loss_at`. Returns the admission times before and after the loss."""
    limits = MemoryLimits()
    pending = [(at, n, None) for n, at in enumerate(arrivals)]
    heapq.heapify(pending)
    before: list[float] = []
    after: list[float] = []
    lost = False
    while pending:
        now, n, prepaid = heapq.heappop(pending)
        if not lost and now >= loss_at:
            limits.clear()
            lost = True
        admission = await limits.admit(
            [Acquire(RATED, "vendor", prepaid=prepaid)], f"job{n}-{now}", reserve=True, now_ms=now
        )
        if admission.allowed:
            (after if lost else before).append(now)
            continue
        [decision] = admission.decisions
        # Back when told (a microsecond late: retry_after is in whole microseconds).
        again = now + decision.retry_after_s * 1000 + 0.001
        heapq.heappush(pending, (again, n, decision.epoch if decision.reserved else None))
    return before, after


def _over_the_rate(times: list[float]) -> float:
    """How far the busiest window of these admissions goes over capacity + rate * t."""
    return max(
        (
            (j - i + 1) - (RATED.capacity + RATED.per_second * (times[j] - times[i]) / 1000)
            for i in range(len(times))
            for j in range(i, len(times))
        ),
        default=0.0,
    )


RATED = TokenBucket("vendor", key="vendor", capacity=3, per_second=2)


@settings(max_examples=150, deadline=None)
@example(arrivals=[0.0] * 10 + [700.0] * 5, loss_at=600.0)
@given(
    arrivals=st.lists(st.floats(0, 4000), min_size=1, max_size=40),
    loss_at=st.floats(0, 6000),
)
def test_reservations_never_let_a_bucket_exceed_its_rate_even_across_a_data_loss(
    arrivals: list[float], loss_at: float
) -> None:
    """Before the loss the old bucket keeps to its rate, after it the fresh one does:
    reservations the old bucket made are not honoured by the new one (which would give
    out its own burst and rate on top of them)."""
    before, after = asyncio.run(_run_jobs(sorted(arrivals), loss_at))

    assert len(before) + len(after) == len(arrivals)  # every job ran in the end
    assert _over_the_rate(before) <= 1e-6
    assert _over_the_rate(after) <= 1e-6


async def test_a_fence_keeps_growing_after_the_state_is_lost() -> None:
    limits = MemoryLimits()
    first = await limits.admit(one(LOCK), "a", now_ms=1000)

    limits.clear()  # what a Redis restarted without persistence does
    second = await limits.admit(one(LOCK), "b", now_ms=1000.001)

    assert first.grant
    assert second.grant
    assert first.grant.fence is not None
    assert second.grant.fence is not None
    assert second.grant.fence > first.grant.fence


async def test_a_refund_goes_back_only_to_the_bucket_state_that_was_charged() -> None:
    limits = MemoryLimits()
    bucket = TokenBucket("v", key="v", capacity=1, per_second=1)
    charged = (await limits.admit([Acquire(bucket, "v")], "old", now_ms=0)).grant
    assert charged is not None
    limits.clear()
    await limits.admit([Acquire(bucket, "v")], "new", now_ms=10)  # the fresh bucket's token

    await limits.release(charged, refund=True)  # charged before the loss: not to this one

    assert not (await limits.peek(Acquire(bucket, "v"), now_ms=20)).allowed


async def test_a_lock_held_by_the_same_owner_is_reported_own_and_taken_over_only_if_asked() -> None:
    limits = MemoryLimits()
    dead = await limits.admit(one(LOCK, "account:a"), "job-1/dead", now_ms=0)
    assert dead.grant is not None

    other = await limits.admit(one(LOCK, "account:a"), "job-2/x", now_ms=10, owner="job-2/")
    asked = await limits.admit(one(LOCK, "account:a"), "job-1/y", now_ms=10, owner="job-1/")
    assert not other.allowed
    assert not other.decisions[0].own
    assert not asked.allowed
    assert asked.decisions[0].own

    taken = await limits.admit(
        one(LOCK, "account:a"), "job-1/z", now_ms=20, owner="job-1/", take_over=True
    )

    assert taken.grant is not None
    assert taken.grant.fence is not None
    assert taken.grant.fence > (dead.grant.fence or 0)
    assert not await limits.extend(dead.grant, now_ms=30)  # the old holder lost it
    await limits.release(dead.grant, now_ms=30)  # and cannot free it
    assert await limits.extend(taken.grant, now_ms=40)


async def test_only_the_owners_own_slots_are_taken_over() -> None:
    limits = MemoryLimits(clock_ms=lambda: 10)
    await limits.admit(one(SLOTS), "job-2/x", now_ms=0)
    await limits.admit(one(SLOTS), "job-1/dead", now_ms=0)

    asked = await limits.admit(one(SLOTS), "job-1/y", now_ms=10, owner="job-1/")
    assert asked.decisions[0].own
    other = await limits.admit(one(SLOTS), "job-3/y", now_ms=10, owner="job-3/", take_over=True)
    assert not other.allowed
    assert not other.decisions[0].own
    taken = await limits.admit(one(SLOTS), "job-1/z", now_ms=10, owner="job-1/", take_over=True)

    assert taken.allowed
    held = {h["holder"] for h in await limits.holders(Acquire(SLOTS, "k"))}
    assert held == {"job-2/x", "job-1/z"}
