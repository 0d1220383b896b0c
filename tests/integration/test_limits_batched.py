"""On a plain Redis, the limit calls made together (one event-loop turn) of one script are
one command: the script's batched form. Each call is decided as it would be alone, and
fails alone. Counted at this test's own connection (a proxy in front of the shared Redis),
never with server-wide statistics."""

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from jobrail.limits.kind import LimitKind
from jobrail.limits.model import (
    Acquire,
    Admission,
    Concurrency,
    Grant,
    LimitsUnavailableError,
    Lock,
    SlidingWindow,
    TokenBucket,
)
from jobrail.limits.redis import RedisLimits
from tests.support.redis_commands import CommandCounter
from tests.support.services import REDIS_URL, delete_redis_keys, require

# What a client sends on a new connection, before its first command.
HANDSHAKE = {"CLIENT", "HELLO", "AUTH", "SELECT"}
NOW = 5_000_000.0

# Slow enough that no token comes back during a test.
BUCKET = TokenBucket("bucket", key="bucket:acme", capacity=3, per_second=0.01)
WINDOW = SlidingWindow("window", key="window:acme", limit=4, window_s=60)
SLOTS = Concurrency("slots", key="slots:acme", slots=2, lease_s=30)
LOCK = Lock(key="resource:{n}", ttl_s=30)


@dataclass
class Counted:
    limits: RedisLimits
    counter: CommandCounter
    prefix: str

    def sent_since(self, since: Counter[str]) -> Counter[str]:
        sent = self.counter.snapshot() - since
        return Counter({name: n for name, n in sent.items() if name not in HANDSHAKE})


@pytest.fixture
async def counted() -> AsyncIterator[Counted]:
    require("redis")
    prefix = f"batch:{uuid.uuid4().hex}:"
    async with CommandCounter() as counter:
        limits = RedisLimits(Redis.from_url(counter.url), key_prefix=prefix)
        await limits.load_scripts()
        try:
            yield Counted(limits, counter, prefix)
        finally:
            await limits.close()
            await delete_redis_keys(prefix)


def _job(n: int, *limits: LimitKind[object]) -> list[Acquire]:
    """Job `n`'s items: a lock of its own, then the shared limits."""
    return [Acquire(LOCK, f"resource:{n}"), *(Acquire(limit, limit.key) for limit in limits)]


async def _admit_together(
    limits: RedisLimits, jobs: Sequence[list[Acquire]], now_ms: float | None = None
) -> list[Admission | BaseException]:
    return await asyncio.gather(
        *(limits.admit(items, f"job{n}/1", now_ms=now_ms) for n, items in enumerate(jobs)),
        return_exceptions=True,
    )


async def test_concurrent_admits_are_one_command_and_decide_as_single_calls(
    counted: Counted,
) -> None:
    jobs = [_job(n, BUCKET, WINDOW, SLOTS) for n in range(5)]

    before = counted.counter.snapshot()
    together = await _admit_together(counted.limits, jobs, now_ms=NOW)
    sent = counted.sent_since(before)

    alone = RedisLimits(Redis.from_url(REDIS_URL), key_prefix=f"{counted.prefix}alone:")
    try:
        one_by_one = [
            await alone.admit(items, f"job{n}/1", now_ms=NOW) for n, items in enumerate(jobs)
        ]
    finally:
        await alone.close()

    assert sent == Counter({"EVALSHA": 1})
    assert together == one_by_one
    # The slots (2 of them) let two jobs in; the others took nothing, not even a token.
    assert [a.allowed for a in one_by_one] == [True, True, False, False, False]
    assert [a.decisions[1].remaining for a in one_by_one[:3]] == [2, 1, 0]
    assert all(a.grant is not None and a.grant.fence for a in one_by_one[:2])


async def test_a_token_bucket_of_three_lets_exactly_three_of_five_concurrent_admits_in(
    counted: Counted,
) -> None:
    before = counted.counter.snapshot()
    admissions = await _admit_together(counted.limits, [_job(n, BUCKET) for n in range(5)])

    assert counted.sent_since(before) == Counter({"EVALSHA": 1})
    assert [a.allowed for a in admissions if isinstance(a, Admission)] == [True] * 3 + [False] * 2


async def test_concurrent_releases_and_extends_are_one_command_each(counted: Counted) -> None:
    limits = counted.limits
    slots = Concurrency("slots", key="slots:acme", slots=4, lease_s=30)
    admissions = await _admit_together(limits, [_job(n, slots) for n in range(4)])
    grants = [a.grant for a in admissions if isinstance(a, Admission) and a.grant is not None]
    assert len(grants) == 4

    before = counted.counter.snapshot()
    held = await asyncio.gather(*(limits.extend(grant) for grant in grants))
    extends_sent = counted.sent_since(before)

    before = counted.counter.snapshot()
    await asyncio.gather(*(limits.release(grant) for grant in grants[:3]))
    releases_sent = counted.sent_since(before)

    after = await asyncio.gather(*(limits.extend(grant) for grant in grants))
    again = await _admit_together(limits, [_job(n, slots) for n in range(10, 14)])

    assert held == [True] * 4
    assert extends_sent == Counter({"EVALSHA": 1})
    assert releases_sent == Counter({"EVALSHA": 1})
    assert after == [False, False, False, True]  # the released ones hold nothing any more
    assert [a.allowed for a in again if isinstance(a, Admission)] == [True, True, True, False]


OTHER_SLOTS = Concurrency("other", key="slots:other", slots=3, lease_s=30)


async def _admits_and_releases(counted: Counted) -> tuple[list[Grant], list[Admission]]:
    """Two jobs admitted; then, in one turn, their releases and three other admissions."""
    limits = counted.limits
    first = await _admit_together(limits, [_job(n, SLOTS) for n in range(2)])
    grants = [a.grant for a in first if isinstance(a, Admission) and a.grant is not None]
    assert len(grants) == 2
    admitted, *_ = await asyncio.gather(
        _admit_together(limits, [_job(n, OTHER_SLOTS) for n in range(2, 5)]),
        *(limits.release(grant) for grant in grants),
    )
    return grants, [a for a in admitted if isinstance(a, Admission)]


async def test_admits_and_releases_of_one_turn_are_one_command_per_script(
    counted: Counted,
) -> None:
    limits = counted.limits
    before = counted.counter.snapshot()
    grants, admitted = await _admits_and_releases(counted)
    sent = counted.sent_since(before)

    assert sent == Counter({"EVALSHA": 3})  # the first two admits, then admits and releases
    assert [a.allowed for a in admitted] == [True] * 3
    assert await asyncio.gather(*(limits.extend(grant) for grant in grants)) == [False, False]
    assert [a.allowed for a in await _admit_together(limits, [_job(5, SLOTS), _job(6, SLOTS)])] == [
        True
    ] * 2


async def test_a_call_on_a_key_of_the_wrong_type_fails_alone(counted: Counted) -> None:
    limits = counted.limits
    jobs = [_job(n, BUCKET) for n in range(5)]
    # Job 2's lock key holds a hash: its admission fails at its lock, before its bucket's
    # key was taken from KEYS. Job 3's keys come next.
    broken = limits.key(jobs[2][0])
    redis = Redis.from_url(REDIS_URL)
    try:
        await redis.hset(broken, "not", "a lock")
        alone: BaseException | None = None
        try:
            await limits.admit(jobs[2], "job2/1")
        except LimitsUnavailableError as exc:
            alone = exc

        before = counted.counter.snapshot()
        results = await _admit_together(limits, jobs)
        sent = counted.sent_since(before)
    finally:
        await redis.aclose()

    assert sent == Counter({"EVALSHA": 1})
    failed = results[2]
    assert isinstance(alone, LimitsUnavailableError)
    assert isinstance(failed, LimitsUnavailableError)
    assert type(failed.__cause__) is type(alone.__cause__) is ResponseError
    assert "WRONGTYPE" in str(failed)
    assert "WRONGTYPE" in str(alone)
    admitted = [r for n, r in enumerate(results) if n != 2]
    assert all(isinstance(a, Admission) for a in admitted)
    # Three tokens: jobs 0, 1 and 3 got one each (job 2 took none), job 4 none.
    assert [a.allowed for a in admitted if isinstance(a, Admission)] == [True, True, True, False]
    # Job 3 locked its own resource (its keys were not shifted by job 2's failure).
    assert [h["holder"] for h in await limits.holders(jobs[3][0])] == ["job3/1"]
    grant = results[3].grant if isinstance(results[3], Admission) else None
    assert isinstance(grant, Grant)
    assert await limits.extend(grant)


async def test_a_batch_whose_script_redis_does_not_know_is_loaded_and_sent_again(
    counted: Counted,
) -> None:
    limits = counted.limits
    # As after a restart of Redis, which forgot the scripts: this client's names of the
    # batched admit and release are ones Redis never saw (SCRIPT FLUSH would empty the
    # cache of every client of the shared server).
    admit, release = limits._batched[limits._admit], limits._batched[limits._release]
    loaded = (admit.sha, release.sha)
    first = await _admit_together(limits, [_job(n, SLOTS) for n in range(2)])
    grants = [a.grant for a in first if isinstance(a, Admission) and a.grant is not None]
    admit.sha, release.sha = "0" * 40, "1" * 40

    before = counted.counter.snapshot()
    admitted, *_ = await asyncio.gather(
        _admit_together(limits, [_job(n, OTHER_SLOTS) for n in range(2, 5)]),
        *(limits.release(grant) for grant in grants),
    )
    sent = counted.sent_since(before)

    assert (admit.sha, release.sha) == loaded
    assert len(grants) == 2
    # Both commands of the pipeline came back NOSCRIPT: both scripts were loaded, and
    # both commands sent again.
    assert sent == Counter({"EVALSHA": 4, "SCRIPT": 2})
    assert [a.allowed for a in admitted if isinstance(a, Admission)] == [True] * 3
    assert await asyncio.gather(*(limits.extend(grant) for grant in grants)) == [False, False]

    # A batch that is a single command (no pipeline) is loaded and sent again too.
    admit.sha = "0" * 40
    before = counted.counter.snapshot()
    alone = await _admit_together(limits, [_job(n, OTHER_SLOTS) for n in range(5, 7)])
    assert counted.sent_since(before) == Counter({"EVALSHA": 2, "SCRIPT": 1})
    assert admit.sha == loaded[0]
    assert [a.allowed for a in alone if isinstance(a, Admission)] == [False, False]  # 3 slots


async def test_a_call_whose_arguments_hold_the_separator_is_sent_on_its_own(
    counted: Counted,
) -> None:
    limits = counted.limits
    jobs = [_job(n) for n in range(3)]
    holders = ["job0/1", "job1/\x1fodd", "job2/1"]

    before = counted.counter.snapshot()
    admitted = await asyncio.gather(
        *(limits.admit(items, holder) for items, holder in zip(jobs, holders, strict=True))
    )
    sent = counted.sent_since(before)

    assert sent == Counter({"EVALSHA": 2})  # jobs 0 and 2 batched, job 1 alone
    assert [a.allowed for a in admitted] == [True] * 3
    seen = [(await limits.holders(items[0]))[0]["holder"] for items in jobs]
    assert seen == holders
