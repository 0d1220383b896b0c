"""A waiting job knows its place on the real services: the API on Postgres holds the
jobs (fair dispatch), a worker process on RabbitMQ releases and runs them, and its
limits are on Redis.

Counted, never timed: each held job's place is its rank among its tenant's enqueues,
the place of the last one only goes down while its line drains, and a job its lock
turns away names the job holding it (from the lock's denial in Redis)."""

import math
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import dispatch_queues
from tests.support.apps import test_jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.recorder import Recorder
from tests.support.services import wait_for

SLOTS = 2
A_JOBS, B_JOBS = 20, 5


@pytest.fixture
def worker_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": "tests.support.apps:test_jobs",
        "JOBRAIL_API_LIMITS__ENABLED": "false",
        "JOBRAIL_DISPATCH__ENABLED": "true",
        "JOBRAIL_DISPATCH__READY_TARGET": str(SLOTS),
        "JOBRAIL_WORKER__MAX_ASYNC_TASKS": str(SLOTS),
        "JOBRAIL_RABBIT__PREFETCH": str(SLOTS),
        "JOBRAIL_LIMITS__CONTENTION_RETRY_S": "0.3",
    }


@pytest.fixture
async def api(
    worker_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: Any,
) -> AsyncIterator[ApiClient]:
    async with make_api(settings_from(worker_env, monkeypatch), test_jobs.modules) as client:
        yield client


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as running:
        yield running


async def test_held_jobs_have_their_places_which_only_go_down_as_the_line_drains(
    api: ApiClient, workers: Callable[..., Any], engine: AsyncEngine, recorder: Recorder
) -> None:
    as_a = await api.auth("a")
    effect = {"url": recorder.url, "sleep_ms": 100}
    # No worker yet, so no dispatcher: every job waits, held, in its tenant's line.
    a = [await api.enqueue("test.effect", effect, "a") for _ in range(A_JOBS)]
    b = [await api.enqueue("test.effect", effect, "b") for _ in range(B_JOBS)]
    async with engine.begin() as conn:  # the queue's figures, as a dispatcher writes them
        await conn.execute(
            insert(dispatch_queues).values(
                queue="jobs.default", drain_per_s=10.0, active_weight=2.0
            )
        )

    in_line = [(await api.job(job, as_a))["waiting"] for job in a]
    b_last = (await api.job(b[-1], await api.auth("b")))["waiting"]
    await workers()
    seen: list[dict[str, Any]] = []
    while True:  # read as fast as it answers while A's line drains ahead of its last
        job = await api.job(a[-1], as_a)
        if job["waiting"] is None or job["waiting"]["position"] is None:
            break
        seen.append(job["waiting"])
    await api.wait_status(a[-1], "succeeded", timeout=60, headers=as_a)

    assert [w["position"] for w in in_line] == list(range(1, A_JOBS + 1))
    assert {w["reason"] for w in in_line} == {"fair_share"}
    assert b_last["position"] == B_JOBS
    last = in_line[-1]
    assert last["ahead_in_queue"] == 2 * (A_JOBS - 1)  # two tenants of weight 1
    assert last["eta"] is not None
    assert math.isfinite(datetime.fromisoformat(last["eta"]).timestamp())
    positions = [w["position"] for w in seen]
    print(f"\nplaces of A's last job read while A's line drained: {positions}")
    assert positions == sorted(positions, reverse=True), "a place went up"
    assert len(set(positions)) >= 3, "the place was not seen moving"


async def test_a_job_its_lock_turns_away_names_the_job_holding_it(
    api: ApiClient, workers: Callable[..., Any], recorder: Recorder
) -> None:
    as_a = await api.auth("a")
    await workers()
    locked = {"url": recorder.url, "resource": "r1", "sleep_ms": 3000}
    holder = await api.enqueue("test.locked_effect", locked, "a")
    await api.wait_status(holder, "running", timeout=30, headers=as_a)
    waiter = await api.enqueue("test.locked_effect", {**locked, "sleep_ms": 0}, "a")

    async def turned_away() -> dict[str, Any] | None:
        waiting = (await api.job(waiter, as_a))["waiting"]
        return waiting if waiting and waiting["reason"] == "lock" else None

    waiting = await wait_for(turned_away, timeout=30, what="the second job to wait for the lock")
    await api.wait_status(waiter, "succeeded", timeout=30, headers=as_a)

    assert waiting["on"] == [
        {
            "kind": "lock",
            "name": "lock",
            "key": "effect:a:r1",
            "held_by_job_id": holder,
        }
    ]
    assert waiting["position"] is None  # released to the workers: no longer in line
