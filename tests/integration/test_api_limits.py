"""API rate limits on the real Redis."""

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.redis_cluster import REDIS_KINDS, redis_env
from tests.support.redis_commands import CommandCounter
from tests.support.tcp_proxy import TcpProxy

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


# What a client sends on a new connection, before its first command.
HANDSHAKE = {"CLIENT", "HELLO", "AUTH", "SELECT"}


def _sent(counter: CommandCounter, since: Counter[str]) -> Counter[str]:
    sent = counter.snapshot() - since
    return Counter({name: n for name, n in sent.items() if name not in HANDSHAKE})


async def test_an_enqueue_checks_every_rule_that_applies_in_one_redis_command(
    stack_env: dict[str, str],
    rabbit: RabbitProbe,
    make_api: Callable[[Any], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key the process has not seen live is first checked against its client's budget
    of failed authentications (per IP and global here): one command for both rules;
    the enqueue's own rules (per tenant and global) are one more. A key seen live costs
    one command per enqueue. Counted at this API's own connection to Redis."""
    budget = [
        {"scope": "ip", "limit": 20, "window_s": 60, "algorithm": "token_bucket"},
        {"scope": "global", "limit": 1000, "window_s": 60, "algorithm": "token_bucket"},
    ]
    async with CommandCounter() as redis:
        env = {
            **stack_env,
            "JOBRAIL_REDIS__URL": redis.url,
            "JOBRAIL_API_LIMITS__AUTH_FAILURES": json.dumps(budget),
        }
        async with make_api(settings_from(env, monkeypatch)) as api:
            warm_up = await api.post(
                "/demo/echo", json={"message": "m"}, headers=await api.auth("warm")
            )  # loads the scripts
            acme = await api.auth("acme")
            before_first = redis.snapshot()
            first = await api.post("/demo/echo", json={"message": "m"}, headers=acme)
            first_sent = _sent(redis, before_first)
            before_more = redis.snapshot()
            more = [
                await api.post("/demo/echo", json={"message": "m"}, headers=acme) for _ in range(5)
            ]
            more_sent = _sent(redis, before_more)

    assert warm_up.status_code == 202
    assert first.status_code == 202
    assert first.headers["RateLimit-Remaining"] == "29"
    assert first_sent == Counter({"EVALSHA": 2})
    assert {r.status_code for r in more} == {202}
    assert more[-1].headers["RateLimit-Remaining"] == "24"
    assert more_sent == Counter({"EVALSHA": 5})


async def test_with_redis_unreachable_enqueue_fails_closed_and_reads_stay_open(
    stack_env: dict[str, str],
    rabbit: RabbitProbe,
    make_api: Callable[[Any], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Redis is taken away from this API only (a proxy of its own stops answering), not
    # from the other clients of the shared server.
    async with TcpProxy(6379) as redis:
        env = {**stack_env, "JOBRAIL_REDIS__URL": f"redis://127.0.0.1:{redis.port}/0"}
        async with make_api(settings_from(env, monkeypatch)) as api:
            await redis.take_down()

            enqueue = await api.post("/demo/echo", json={"message": "m"})
            read = await api.get("/jobs")
            health = await api.get("/health")

            assert enqueue.status_code == 503
            assert enqueue.headers["Retry-After"] == "5"
            assert enqueue.json()["error"]["code"] == "service_unavailable"
            assert read.status_code == 200
            assert "RateLimit-Limit" not in read.headers
            assert health.status_code == 200

            await redis.accept()
