"""The memory and Redis backends decide the same, for the same sequences of acquires,
releases, extensions, clock steps (Redis is given the virtual time) and losses of all
their data (a Redis restarted without persistence: here, this test's keys deleted)."""

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobrail.limits.kind import reservation
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import Acquire, Concurrency, Grant, Lock, SlidingWindow, TokenBucket
from jobrail.limits.redis import RedisLimits
from tests.support.redis_cluster import Connect

# Keys are these plus '-0' or '-1'; all have the owner 'prop' (tb:prop:-0), so that one
# admission's keys share a slot when the Redis is a cluster.
LIMITS = [
    TokenBucket("tb", key="tb:prop:", capacity=3, per_second=2.5, cost=1),
    TokenBucket("tb2", key="tb2:prop:", capacity=4, per_second=0.7, cost=2),
    SlidingWindow("sw", key="sw:prop:", limit=3, window_s=1.3),
    Concurrency("cs", key="cs:prop:", slots=2, lease_s=0.9),
    Lock(key="lk:prop:", ttl_s=0.6),
]


@dataclass(frozen=True)
class AdmitOp:
    which: tuple[int, ...]
    keys: tuple[int, ...]
    reserve: bool = False
    prepaid: tuple[bool, ...] = (False, False, False)
    owner: int = 0  # 0: none; else the holder is "job<owner>/<n>" (a job's admission)
    take_over: bool = False


@dataclass(frozen=True)
class ReleaseOp:
    grant: int
    refund: bool


@dataclass(frozen=True)
class ExtendOp:
    grant: int


@dataclass(frozen=True)
class PeekOp:
    which: int
    key: int


@dataclass(frozen=True)
class LoseDataOp:
    """Everything is forgotten, reservations' buckets and fencing counters included."""


admits = st.builds(
    AdmitOp,
    st.lists(st.integers(0, len(LIMITS) - 1), min_size=1, max_size=3, unique=True).map(tuple),
    st.lists(st.sampled_from([0, 0, 0, 1]), min_size=3, max_size=3).map(tuple),
    st.booleans(),
    st.lists(st.booleans(), min_size=3, max_size=3).map(tuple),
    st.integers(0, 2),
    st.booleans(),
)
# Admissions dominate and time often stands still, so that limits fill up and say no.
ops = st.one_of(
    admits,
    admits,
    admits,
    st.builds(ReleaseOp, st.integers(0, 20), st.booleans()),
    st.builds(ExtendOp, st.integers(0, 20)),
    st.builds(PeekOp, st.integers(0, len(LIMITS) - 1), st.integers(0, 1)),
    st.just(LoseDataOp()),
)
steps = st.lists(
    st.tuples(ops, st.sampled_from([0.0, 0.0, 0.0, 1.0, 17.5, 120.0, 333.3, 700.0])),
    max_size=40,
)


def _summary(admission: Any) -> Any:
    return (
        admission.allowed,
        [
            (
                d.name,
                d.allowed,
                float(d.remaining),
                round(d.retry_after_s, 6),
                d.reserved,
                d.epoch,
                d.own,
                d.until,
                d.holder,
            )
            for d in admission.decisions
        ],
        admission.grant.fence if admission.grant else None,
    )


async def _play(sequence: list[tuple[Any, float]], connect: Connect) -> tuple[list[Any], list[Any]]:
    redis = connect()
    prefix = f"prop:{uuid.uuid4().hex}:"
    memory = MemoryLimits()
    backends: list[MemoryLimits | RedisLimits] = [memory, RedisLimits(redis, key_prefix=prefix)]
    results: list[list[Any]] = [[], []]
    grants: list[list[Grant]] = [[], []]
    # The last reservation each backend made for a bucket key (its epoch and use-by
    # time): what a job deferred by it would come back with (after a data loss, a
    # reservation the fresh bucket never made; after its time, one that has gone).
    epochs: list[dict[str, str]] = [{}, {}]
    now = 1_000_000.0
    try:
        for n, (op, step) in enumerate(sequence):
            now += step
            for b, backend in enumerate(backends):
                if isinstance(op, AdmitOp):
                    items = [
                        Acquire(
                            LIMITS[i],
                            f"{LIMITS[i].key}-{op.keys[j]}",
                            prepaid=epochs[b].get(f"{LIMITS[i].key}-{op.keys[j]}")
                            if op.prepaid[j] and isinstance(LIMITS[i], TokenBucket)
                            else None,
                        )
                        for j, i in enumerate(op.which)
                    ]
                    owner = f"job{op.owner}/" if op.owner else ""
                    admission = await backend.admit(
                        items,
                        f"{owner}holder{n}",
                        reserve=op.reserve,
                        now_ms=now,
                        owner=owner,
                        take_over=op.take_over,
                    )
                    for item, decision in zip(items, admission.decisions, strict=True):
                        if decision.epoch is not None:
                            epochs[b][item.key] = reservation(decision.epoch, decision.until)
                    if admission.grant:
                        grants[b].append(admission.grant)
                    results[b].append(("admit", _summary(admission)))
                elif isinstance(op, LoseDataOp):
                    if isinstance(backend, MemoryLimits):
                        backend.clear()
                    else:
                        keys = [
                            key async for key in redis.scan_iter(match=f"{prefix}*", count=10_000)
                        ]
                        if keys:
                            await redis.delete(*keys)
                    results[b].append(("lost",))
                elif isinstance(op, ReleaseOp) and op.grant < len(grants[b]):
                    await backend.release(grants[b][op.grant], refund=op.refund, now_ms=now)
                    results[b].append(("release",))
                elif isinstance(op, ExtendOp) and op.grant < len(grants[b]):
                    held = await backend.extend(grants[b][op.grant], now_ms=now)
                    results[b].append(("extend", held))
                elif isinstance(op, PeekOp):
                    limit = LIMITS[op.which]
                    decision = await backend.peek(
                        Acquire(limit, f"{limit.key}-{op.key}"), now_ms=now
                    )
                    results[b].append(
                        (
                            "peek",
                            decision.allowed,
                            float(decision.remaining),
                            round(decision.retry_after_s, 6),
                        )
                    )
    finally:
        await redis.aclose()
    return results[0], results[1]


# Reservations: a bucket emptied at one instant, then callers that reserve and come back.
RESERVING = [
    *[(AdmitOp((0,), (0, 0, 0), True), 0.0)] * 5,
    (AdmitOp((0, 4), (0, 0, 0), False, (True, False, False)), 400.0),
    (AdmitOp((1,), (0, 0, 0), True), 0.0),
    (AdmitOp((1,), (0, 0, 0), True), 0.0),
    (AdmitOp((1, 4), (0, 0, 0), True), 0.0),
]
# A reservation brought back early (kept), on time (honoured) and after its time (it
# competes again).
RESERVED_AND_BACK = [
    *[(AdmitOp((0,), (0, 0, 0), True), 0.0)] * 8,
    (AdmitOp((0,), (0, 0, 0), True, (True, False, False)), 1700.0),  # early: kept
    (AdmitOp((0,), (0, 0, 0), True, (True, False, False)), 300.0),  # honoured
    (AdmitOp((0,), (0, 0, 0), True, (True, False, False)), 900.0),  # gone: competes
    (ReleaseOp(3, True), 0.0),
    (ReleaseOp(4, True), 0.0),
]
# The same, with the data lost while reservations are out: they are not honoured.
RESERVING_ACROSS_A_LOSS = [
    *[(AdmitOp((0, 4), (0, 0, 0), True), 0.0)] * 5,
    (LoseDataOp(), 100.0),
    *[(AdmitOp((0, 4), (0, 0, 0), True, (True, False, False)), 300.0)] * 4,
    *[(AdmitOp((0,), (0, 0, 0), True, (True, False, False)), 0.0)] * 3,
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(RESERVING)
@example(RESERVED_AND_BACK)
@example(RESERVING_ACROSS_A_LOSS)
@given(steps)
def test_memory_and_redis_backends_decide_the_same(
    redis_connect: Connect, sequence: list[tuple[Any, float]]
) -> None:
    memory, redis = asyncio.run(_play(sequence, redis_connect))
    assert memory == redis


def test_a_lock_s_denial_names_its_holder_on_both_backends(redis_connect: Connect) -> None:
    """The holder comes back with the denial, in the same round trip (a waiting job
    names the job that holds its lock from it)."""

    async def play_both() -> list[list[Any]]:
        redis = redis_connect()
        try:
            backends = [
                MemoryLimits(),
                RedisLimits(redis, key_prefix=f"holder:{uuid.uuid4().hex}:"),
            ]
            seen = []
            for backend in backends:
                lock = [Acquire(Lock(key="report:{id}", ttl_s=5), "report:{acme}:7")]
                slots = [Acquire(Concurrency("cs", key="c", slots=1, lease_s=5), "c:{acme}")]
                taken = await backend.admit([*lock, *slots], "job-a/1", now_ms=1000)
                denied = await backend.admit([*lock, *slots], "job-b/2", now_ms=1001)
                peeked = await backend.peek(lock[0], now_ms=1002)
                seen.append(
                    [taken.decisions[0].holder, [d.holder for d in denied.decisions], peeked.holder]
                )
            return seen
        finally:
            await redis.aclose()

    memory, redis = asyncio.run(play_both())

    assert memory == redis
    assert memory == [None, ["job-a/1", None], "job-a/1"]
