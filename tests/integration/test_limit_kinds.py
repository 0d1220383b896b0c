"""A limit kind is one class: a kind the backends have never heard of works in both,
inside the same one-script, all-or-nothing admission as the others."""

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from jobrail.limits.kind import Context, Decision, LimitKind, Verdict, num, wait_ms
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import KINDS, Acquire, Admission, Lock, TokenBucket
from jobrail.limits.redis import RedisLimits
from tests.support.redis_cluster import Connect

Counts = dict[str, int]


@dataclass(frozen=True, slots=True)
class Quota(LimitKind[Counts]):
    """At most `limit` acquires per key until it is reset (a kind made up for this test)."""

    name: str
    key: str
    limit: int

    kind: ClassVar[str] = "qt"
    LUA: ClassVar[str] = """
KINDS['qt'] = {
  admit = function(c, k, p)
    local used, limit = tonumber(redis.call('GET', k[1]) or 0), tonumber(p[1])
    if used >= limit then return 0, 0, 1000, 0, '', 0, nil, nil end
    local function take()
      redis.call('INCR', k[1])
      gc(k[1], 60000)
    end
    return 1, limit - used - 1, 0, 0, '', 0, take, nil
  end,
  release = function(c, k, p)
    if c.refund then redis.call('DECR', k[1]) end
  end,
}
"""

    def admit_args(self, prepaid: str | None) -> list[str]:
        return [num(self.limit), "", "", ""]

    @classmethod
    def new_state(cls) -> Counts:
        return {}

    def evaluate(self, state: Counts, key: str, prepaid: str | None, c: Context) -> Verdict:
        used = state.get(key, 0)
        if used >= self.limit:
            return Verdict(Decision(self.name, False, 0, wait_ms(1000)))

        def take() -> None:
            state[key] = used + 1

        return Verdict(Decision(self.name, True, self.limit - used - 1, None), take=take)

    def release(
        self, state: Counts, key: str, holder: str, epoch: str | None, refund: bool
    ) -> None:
        if refund:
            state[key] -= 1

    def reset(self, state: Counts, key: str) -> None:
        state.pop(key, None)

    @classmethod
    def prune(cls, state: Counts, now: float) -> Counts:
        return state


QUOTA = Quota("quota", key="quota:acme", limit=2)
BUCKET = TokenBucket("bucket", key="bucket:acme", capacity=10, per_second=1)
LOCK = Lock(key="lock:acme", ttl_s=5)


def _seen(admission: Admission) -> tuple[Any, ...]:
    return (
        admission.allowed,
        [(d.name, d.allowed, float(d.remaining), d.retry_after_s) for d in admission.decisions],
        admission.grant.fence is not None if admission.grant else None,
    )


async def _play(backend: MemoryLimits | RedisLimits) -> list[Any]:
    def items(lock_key: str) -> list[Acquire]:
        return [
            Acquire(BUCKET, BUCKET.key),
            Acquire(QUOTA, QUOTA.key),
            Acquire(LOCK, lock_key),
        ]

    now, seen = 1_000_000.0, list[Any]()
    first = await backend.admit(items(LOCK.key), "h1", now_ms=now)
    seen.append(_seen(first))
    # The lock is held: nothing of this admission is taken, the quota least of all.
    seen.append(_seen(await backend.admit(items(LOCK.key), "h2", now_ms=now + 1)))
    seen.append(_seen(await backend.admit(items(f"{LOCK.key}:b"), "h3", now_ms=now + 2)))
    # The quota is spent: the lock (free) is not taken either.
    seen.append(_seen(await backend.admit(items(f"{LOCK.key}:c"), "h4", now_ms=now + 3)))
    assert first.grant is not None
    await backend.release(first.grant, refund=True, now_ms=now + 4)
    seen.append(_seen(await backend.admit(items(f"{LOCK.key}:c"), "h5", now_ms=now + 5)))
    seen.append(await backend.peek(Acquire(QUOTA, QUOTA.key), now_ms=now + 6))
    return seen


def test_a_new_kind_works_in_both_backends_within_one_admission(redis_connect: Connect) -> None:
    async def play_both() -> tuple[list[Any], list[Any]]:
        redis = redis_connect()
        prefix = f"kind:{uuid.uuid4().hex}:"
        try:
            backend = RedisLimits(redis, key_prefix=prefix, kinds=(*KINDS, Quota))
            return await _play(MemoryLimits()), await _play(backend)
        finally:
            await redis.aclose()

    memory, redis = asyncio.run(play_both())

    assert memory == redis
    allowed = [step[0] for step in memory[:5]]
    assert allowed == [True, False, True, False, True]
    assert memory[1][1] == [
        ("bucket", True, 8.0, 0.0),
        ("quota", True, 0.0, 0.0),
        ("lock", False, 0.0, 5.0 - 0.001),
    ]
    assert memory[3][1][1] == ("quota", False, 0.0, 1.0)
    assert not memory[5].allowed  # the refund gave one back, and h5 took it
