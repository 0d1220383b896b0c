"""Job limits and locks across real worker processes, Redis and RabbitMQ."""

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.persistence.tables import jobs as jobs_table
from jobrail.settings import Settings
from tests.support.fixtures import ApiClient, settings_from
from tests.support.recorder import Recorder
from tests.support.redis_cluster import REDIS_KINDS, RedisCluster, redis_env
from tests.support.services import start_redis, stop_redis, wait_for

TEST_MODULES = "jobrail.demo,tests.support.jobs"

# Run on a single Redis and on a three-master Redis Cluster (tests/support/redis_cluster.py).
on_both = pytest.mark.parametrize("limits_env", REDIS_KINDS, indirect=True)


@pytest.fixture
def limits_env(stack_env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_MODULES": TEST_MODULES,
        "JOBRAIL_API_LIMITS__ENABLED": "false",
        **redis_env(getattr(request, "param", "redis"), request),
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
    async with make_api(settings_from(limits_env, monkeypatch)) as api:
        yield api


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as running:
        yield running


async def _all_succeeded(
    api: ApiClient, ids: list[str], timeout: float, engine: AsyncEngine, tenant: str | None = None
) -> list[dict[str, Any]]:
    """Wait with one cheap query per poll (polling 200 jobs over HTTP would load the
    machine the workers are being measured on), then read the jobs once."""
    wanted = [uuid.UUID(i) for i in ids]

    async def done() -> bool:
        async with engine.connect() as conn:
            succeeded = await conn.scalar(
                select(func.count())
                .select_from(jobs_table)
                .where(jobs_table.c.id.in_(wanted), jobs_table.c.status == "succeeded")
            )
        return succeeded == len(wanted)

    await wait_for(done, timeout=timeout, interval=0.2, what="all jobs to succeed")
    headers = await api.auth(tenant) if tenant else None
    return [await api.job(i, headers) for i in ids]


@on_both
async def test_a_fleet_of_workers_keeps_to_the_rate_limit_without_starving(
    limits_api: ApiClient,
    workers: Callable[..., Any],
    recorder: Recorder,
    engine: AsyncEngine,
) -> None:
    rate, burst, jobs = 10.0, 5.0, 200
    env = {
        "JOBRAIL_TEST_RATE": str(rate),
        "JOBRAIL_TEST_BURST": str(burst),
        # The suite's relays take rows after 0.5 s; 200 enqueues at once can keep some
        # fast paths busy longer than that, and a message published twice reserves two
        # tokens, one of them wasted. Relay at the production default instead.
        "JOBRAIL_OUTBOX__RELAY_MIN_AGE_S": "2.0",
    }
    for n in range(4):
        await workers(f"worker-{n}", **env)
    # Warm every worker's connections first (another tenant: another bucket), so that
    # the first measured calls do not pay for opening them.
    warm = [
        await limits_api.enqueue("test.vendor_call", {"url": recorder.url, "n": -1}, "warm")
        for _ in range(20)
    ]
    await _all_succeeded(limits_api, warm, 30, engine, tenant="warm")
    recorder.calls.clear()

    ids = list(
        await asyncio.gather(
            *(
                limits_api.enqueue("test.vendor_call", {"url": recorder.url, "n": n})
                for n in range(jobs)
            )
        )
    )
    finished = await _all_succeeded(limits_api, ids, 60, engine)
    done_at = time.monotonic()

    times = sorted(call.at for call in recorder.calls)
    assert len(times) == jobs
    # A call reaches the server some milliseconds after Redis admitted it (the claim in
    # Postgres, scheduling on a loaded machine); allow 50 ms of spread in that delay,
    # which at this rate is half a call: one call too many still fails the test.
    slack = 0.05
    worst = max(
        (j - i + 1) - (burst + rate * (times[j] - times[i] + slack))
        for i in range(len(times))
        for j in range(i, len(times))
    )
    assert worst <= 0, f"a window saw {worst:.2f} calls more than burst + rate * t"
    elapsed = done_at - times[0]
    ideal = (jobs - burst) / rate
    achieved = (jobs - burst) / (times[-1] - times[0])
    print(
        f"\nrate limit {rate}/s burst {burst:g}: achieved {achieved:.2f}/s, "
        f"all {jobs} done in {elapsed:.2f}s (ideal {ideal:.2f}s, x{elapsed / ideal:.3f})"
    )
    assert elapsed <= 1.15 * ideal
    assert {job["attempts"] for job in finished} == {1}, "deferrals must not spend attempts"


@on_both
async def test_one_lock_key_never_runs_two_jobs_at_once(
    limits_api: ApiClient,
    workers: Callable[..., Any],
    recorder: Recorder,
    engine: AsyncEngine,
) -> None:
    for n in range(4):
        await workers(f"worker-{n}")

    ids = list(
        await asyncio.gather(
            *(
                limits_api.enqueue(
                    "test.exclusive", {"url": recorder.url, "resource": "r1", "n": n}
                )
                for n in range(100)
            )
        )
    )
    finished = await _all_succeeded(limits_api, ids, 120, engine)

    assert recorder.max_active == 1
    assert len([c for c in recorder.calls if c.params["phase"] == "end"]) == 100
    assert {job["attempts"] for job in finished} == {1}


@on_both
async def test_a_job_that_stalls_past_its_lock_ttl_has_its_fenced_write_refused_and_is_retried(
    limits_api: ApiClient,
    workers: Callable[..., Any],
    recorder: Recorder,
    engine: AsyncEngine,
) -> None:
    env = {
        "JOBRAIL_TEST_LOCK_TTL": "1",
        "JOBRAIL_RABBIT__PREFETCH": "1",
        "JOBRAIL_WORKER__MAX_ASYNC_TASKS": "1",
    }
    # Both workers up first (one prefetched message each): the stalled one blocks its
    # whole process, so the healthy job can only go to the other, which must be ready
    # well within the stall for the lock to change hands during it.
    await workers("one", **env)
    await workers("two", **env)
    stuck = await limits_api.enqueue(
        "test.stall", {"url": recorder.url, "resource": "acct-1", "name": "stuck", "stall_s": 3}
    )
    await limits_api.wait_status(stuck, "running")
    healthy = await limits_api.enqueue(
        "test.stall", {"url": recorder.url, "resource": "acct-1", "name": "healthy"}
    )

    finished = await _all_succeeded(limits_api, [stuck, healthy], 30, engine)

    writes = [
        (c.params["name"], int(c.params["fence"]), c.params["accepted"]) for c in recorder.calls
    ]
    assert writes[0][0] == "healthy"
    assert writes[0][2] == "1"
    refused = [w for w in writes if w[2] == "0"]
    assert [w[0] for w in refused] == ["stuck"], writes
    assert refused[0][1] < writes[0][1], "the stale holder's fence is the older one"
    assert writes[-1][0] == "stuck"
    assert writes[-1][2] == "1"
    assert finished[0]["attempts"] == 2
    assert finished[1]["attempts"] == 1


@on_both
async def test_a_worker_killed_while_holding_a_lock_frees_it_after_its_ttl(
    limits_api: ApiClient,
    workers: Callable[..., Any],
    recorder: Recorder,
    engine: AsyncEngine,
) -> None:
    env = {"JOBRAIL_TEST_LOCK_TTL": "2", "JOBRAIL_JOBS__TIMEOUTS_S": '{"test.exclusive": 5}'}
    doomed = await workers("doomed", **env)
    job_id = await limits_api.enqueue(
        "test.exclusive", {"url": recorder.url, "resource": "r9", "hold_ms": 2500}
    )
    await limits_api.wait_status(job_id, "running")
    await wait_for(_async(lambda: len(recorder.calls) >= 1), what="the job to start")

    doomed.kill()
    await workers("rescuer", **env)
    job = await limits_api.wait_status(job_id, "succeeded", timeout=40)

    assert job["attempts"] == 2
    starts = [c.at for c in recorder.calls if c.params["phase"] == "start"]
    assert len(starts) == 2
    assert starts[1] - starts[0] >= 2.0, "the second holder waited for the lock's TTL"


@on_both
async def test_an_admitted_job_costs_at_most_two_redis_round_trips(
    limits_api: ApiClient,
    workers: Callable[..., Any],
    recorder: Recorder,
    limits_env: dict[str, str],
    request: pytest.FixtureRequest,
) -> None:
    await workers()
    warm = await limits_api.enqueue("test.exclusive", {"url": recorder.url, "resource": "warm"})
    await limits_api.wait_status(warm, "succeeded")
    # The test's own cluster counts only this session's scripts, summed over its nodes.
    cluster: RedisCluster | None = (
        request.getfixturevalue("redis_cluster")
        if limits_env["JOBRAIL_REDIS__CLUSTER"] == "true"
        else None
    )

    with RedisCommands(cluster) as redis:
        for n in range(20):  # one at a time, so that none is deferred by another
            job_id = await limits_api.enqueue(
                "test.exclusive", {"url": recorder.url, "resource": f"r{n}"}
            )
            await limits_api.wait_status(job_id, "succeeded")

    print(
        f"\nscripts sent to Redis for 20 jobs with a lock and a concurrency limit: {redis.scripts}"
    )
    assert redis.scripts <= 2 * 20


async def test_with_redis_down_limited_jobs_wait_and_others_run_then_all_recover(
    limits_api: ApiClient, workers: Callable[..., Any], recorder: Recorder, redis_restarted: None
) -> None:
    await workers(JOBRAIL_LIMITS__UNAVAILABLE_RETRY_MAX_S="1")
    await asyncio.to_thread(stop_redis)

    limited = await limits_api.enqueue("test.exclusive", {"url": recorder.url, "resource": "x"})
    plain = await limits_api.echo(message="no limits")
    await limits_api.wait_status(plain, "succeeded")
    await asyncio.sleep(1.5)
    waiting = await limits_api.job(limited)
    assert waiting["status"] == "pending"
    assert waiting["attempts"] == 0
    assert recorder.calls == []

    await asyncio.to_thread(start_redis)
    job = await limits_api.wait_status(limited, "succeeded", timeout=30)
    assert job["attempts"] == 1


@pytest.fixture
def redis_restarted() -> Iterator[None]:
    try:
        yield
    finally:
        start_redis()


class RedisCommands:
    """Scripts clients sent to Redis, from INFO commandstats. (MONITOR drops lines under
    load; a script's own inner commands count under their names, not as scripts.)"""

    def __init__(self, cluster: RedisCluster | None = None) -> None:
        self._cluster = cluster

    def __enter__(self) -> "RedisCommands":
        self._before = self._count()
        return self

    def __exit__(self, *exc: object) -> None:
        self.scripts = self._count() - self._before

    def _count(self) -> int:
        from redis import Redis

        if self._cluster is not None:
            return self._cluster.commandstat_calls("evalsha", "eval")

        client = Redis()
        stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
        client.close()
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


def _async(check: Callable[[], bool]) -> Callable[[], Any]:
    async def predicate() -> bool:
        return check()

    return predicate


def _unused(settings: Settings) -> None:
    del settings
