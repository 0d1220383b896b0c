"""Limits after the store lost its data, simulated by deleting this test's Redis keys
(a Redis restarted without persistence: tests/faults/test_redis_data_loss.py does the
real restart). The shared Redis is never flushed: other sessions use it."""

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.limits.model import Acquire, Lock
from jobrail.limits.redis import RedisLimits
from tests.support import rate_after_loss
from tests.support.apps import test_jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.recorder import Recorder
from tests.support.services import REDIS_URL, delete_redis_keys, require


@pytest.fixture
def limits_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": "tests.support.apps:test_jobs",
        "JOBRAIL_API_LIMITS__ENABLED": "false",
    }


@pytest.fixture
def worker_env(limits_env: dict[str, str]) -> dict[str, str]:
    return limits_env


@pytest.fixture
async def limits_api(
    limits_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: Any,
) -> Any:
    async with make_api(settings_from(limits_env, monkeypatch), test_jobs.modules) as api:
        yield api


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as running:
        yield running


async def test_after_the_store_lost_its_data_no_second_starts_more_than_capacity_plus_rate(
    limits_api: ApiClient,
    workers: Callable[..., Any],
    recorder: Recorder,
    engine: AsyncEngine,
    limits_env: dict[str, str],
) -> None:
    prefix = limits_env["JOBRAIL_REDIS__KEY_PREFIX"]

    measured = await rate_after_loss.run(
        limits_api, workers, recorder, engine, lambda: delete_redis_keys(prefix)
    )

    ceiling = rate_after_loss.CAPACITY + rate_after_loss.RATE
    print(
        f"\ncalls per second after the loss: {rate_after_loss.per_second(measured.after)}, "
        f"busiest second {measured.busiest} (ceiling {ceiling:g})"
    )
    assert measured.before >= rate_after_loss.CAPACITY
    assert measured.busiest <= ceiling


async def test_fences_keep_growing_after_the_store_lost_its_data() -> None:
    require("redis")
    prefix = f"b1-fence-{uuid.uuid4().hex}:"
    limits = RedisLimits(Redis.from_url(REDIS_URL), key_prefix=prefix)
    lock = Acquire(Lock(key="account:{account_id}", ttl_s=30), "account:1")
    try:
        first = await limits.admit([lock], "first")
        await delete_redis_keys(prefix)  # the lock and its fencing counter are gone
        second = await limits.admit([lock], "second")
    finally:
        await delete_redis_keys(prefix)
        await limits.close()

    assert first.grant is not None
    assert second.grant is not None
    assert first.grant.fence is not None
    assert second.grant.fence is not None
    assert second.grant.fence > first.grant.fence
