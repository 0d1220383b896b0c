"""Redis restarted without persistence (as the compose file runs it): everything it held
is gone. Rates still hold from the first second after, and fencing tokens still grow.

Each test restarts the shared Redis once; its fixture starts it again whatever happens.
"""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.limits.model import Acquire, Lock
from jobrail.limits.redis import RedisLimits
from tests.faults.conftest import in_thread
from tests.support import rate_after_loss
from tests.support.fixtures import ApiClient
from tests.support.recorder import Recorder
from tests.support.services import REDIS_URL, start_redis, stop_redis


@pytest.fixture
def redis_restored() -> Iterator[None]:
    try:
        yield
    finally:
        start_redis()


async def _restart_redis() -> None:
    await in_thread(stop_redis)  # SHUTDOWN NOSAVE: with --save "" nothing comes back
    await in_thread(start_redis)


async def test_after_a_redis_restart_that_lost_everything_rates_hold_every_second(
    api: ApiClient,
    workers: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    redis_restored: None,
    report: Any,
) -> None:
    measured = await rate_after_loss.run(api, workers, recorder, engine, _restart_redis)

    ceiling = rate_after_loss.CAPACITY + rate_after_loss.RATE
    seconds = rate_after_loss.per_second(measured.after)
    assert measured.before >= rate_after_loss.CAPACITY
    assert measured.busiest <= ceiling, f"calls per second after the restart: {seconds}"
    report(
        scenario="redis restarted, data lost",
        jobs=rate_after_loss.JOBS_BEFORE + rate_after_loss.JOBS_AFTER,
        succeeded=rate_after_loss.JOBS_BEFORE + rate_after_loss.JOBS_AFTER,
        lost=0,
        duplicated=0,
        redeliveries_absorbed=0,
        recover_s=0.0,
        notes=f"calls/s after: {seconds}, busiest 1 s window {measured.busiest} "
        f"(ceiling {ceiling:g})",
    )


async def test_fences_keep_growing_across_a_redis_restart_that_lost_everything(
    redis_restored: None,
) -> None:
    prefix = f"b1-fence-{uuid.uuid4().hex}:"
    lock = Acquire(Lock(key="account:{account_id}", ttl_s=30), "account:1")
    before = RedisLimits(Redis.from_url(REDIS_URL), key_prefix=prefix)
    try:
        first = await before.admit([lock], "first")
    finally:
        await before.close()

    await _restart_redis()

    redis = Redis.from_url(REDIS_URL)
    after = RedisLimits(redis, key_prefix=prefix)
    try:
        assert await after.holders(lock) == []  # the lock, and its fence counter, are gone
        second = await after.admit([lock], "second")
    finally:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=10_000)]
        if keys:
            await redis.delete(*keys)
        await after.close()
    assert first.grant is not None
    assert second.grant is not None
    assert first.grant.fence is not None
    assert second.grant.fence is not None
    assert second.grant.fence > first.grant.fence
