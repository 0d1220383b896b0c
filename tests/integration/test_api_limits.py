"""API rate limits on the real Redis."""

import asyncio
from collections.abc import Iterator

import pytest

from tests.support.fixtures import ApiClient
from tests.support.redis_cluster import REDIS_KINDS, redis_env
from tests.support.services import start_redis, stop_redis

# Run on a single Redis and on a three-master Redis Cluster (tests/support/redis_cluster.py).
on_both = pytest.mark.parametrize("stack_env", REDIS_KINDS, indirect=True)


@pytest.fixture
def stack_env(stack_env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    return {**stack_env, **redis_env(getattr(request, "param", "redis"), request)}


@on_both
async def test_the_31st_enqueue_in_a_minute_is_refused_for_that_tenant_only(
    api: ApiClient,
) -> None:
    acme, globex = await api.auth("acme"), await api.auth("globex")
    accepted = [
        await api.post("/demo/echo", json={"message": "m"}, headers=acme) for _ in range(30)
    ]
    refused = await api.post("/demo/echo", json={"message": "m"}, headers=acme)
    other = await api.post("/demo/echo", json={"message": "m"}, headers=globex)

    assert {r.status_code for r in accepted} == {202}
    assert accepted[0].headers["RateLimit-Limit"] == "30"
    assert accepted[0].headers["RateLimit-Remaining"] == "29"
    assert accepted[-1].headers["RateLimit-Remaining"] == "0"
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "30 per 60s per tenant" in refused.json()["error"]["message"]
    retry_after = int(refused.headers["Retry-After"])
    assert 55 <= retry_after <= 60
    assert refused.headers["RateLimit-Limit"] == "30"
    assert refused.headers["RateLimit-Remaining"] == "0"
    assert refused.headers["RateLimit-Reset"] == str(retry_after)
    assert other.status_code == 202
    assert other.headers["RateLimit-Remaining"] == "29"


@on_both
async def test_reads_have_their_own_looser_limit(api: ApiClient) -> None:
    response = await api.get("/jobs")

    assert response.status_code == 200
    assert response.headers["RateLimit-Limit"] == "1200"


@pytest.fixture
def redis_restarted() -> Iterator[None]:
    try:
        yield
    finally:
        start_redis()


async def test_with_redis_stopped_enqueue_fails_closed_and_reads_stay_open(
    api: ApiClient, redis_restarted: None
) -> None:
    await asyncio.to_thread(stop_redis)

    enqueue = await api.post("/demo/echo", json={"message": "m"})
    read = await api.get("/jobs")
    health = await api.get("/health")

    assert enqueue.status_code == 503
    assert enqueue.headers["Retry-After"] == "5"
    assert enqueue.json()["error"]["code"] == "service_unavailable"
    assert read.status_code == 200
    assert "RateLimit-Limit" not in read.headers
    assert health.status_code == 200

    await asyncio.to_thread(start_redis)
    assert (await api.post("/demo/echo", json={"message": "m"})).status_code == 202
