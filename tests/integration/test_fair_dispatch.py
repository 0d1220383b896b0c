"""Fair dispatch on the real services: a worker process on RabbitMQ and Postgres, jobs
held at their enqueue and released by the worker's dispatcher.

A tenant that arrives behind another's backlog starts its jobs among that backlog, not
after it; every job runs once. Counted by the order of starts
(``tests/support/fair_starts.py``), never by time: the worker has SLOTS slots and takes
no more messages than that (its prefetch), and at most SLOTS released messages wait in
the queue, so once B has arrived each of its jobs has only a few of A's ahead of it.
First in, first out, B's ten would start after nearly all of A's."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs
from tests.support.fair_starts import module, started
from tests.support.fixtures import ApiClient, settings_from
from tests.support.services import wait_for

BACKLOG = 200
LATE = 10
SLOTS = 8


@pytest.fixture
def worker_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": "tests.support.fair_starts:rail",
        "JOBRAIL_API_LIMITS__ENABLED": "false",
        "JOBRAIL_DISPATCH__ENABLED": "true",
        "JOBRAIL_DISPATCH__READY_TARGET": str(SLOTS),
        "JOBRAIL_WORKER__MAX_ASYNC_TASKS": str(SLOTS),
        "JOBRAIL_RABBIT__PREFETCH": str(SLOTS),
    }


@pytest.fixture
async def api(
    worker_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: Any,
) -> AsyncIterator[ApiClient]:
    async with make_api(settings_from(worker_env, monkeypatch), [module]) as client:
        yield client


def _starts(path: str, count: int) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return len(started(path)) >= count

    return reached


async def _enqueue(api: ApiClient, tenant: str, path: str, count: int, work_s: float) -> list[str]:
    step = {"path": path, "work_s": work_s}
    return list(
        await asyncio.gather(*(api.enqueue("test.fair_step", step, tenant) for _ in range(count)))
    )


async def _unfinished(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).where(
                jobs.c.type == "test.fair_step", jobs.c.status != "succeeded"
            )
        )
    return int(count or 0)


async def test_a_late_tenant_starts_among_the_backlog_and_every_job_runs_once(
    api: ApiClient, workers: Callable[..., Any], engine: AsyncEngine, tmp_path: Path
) -> None:
    await workers()
    path = str(tmp_path / "starts")
    a_ids = await _enqueue(api, "a", path, BACKLOG, work_s=0.1)
    await wait_for(_starts(path, SLOTS), timeout=60, what="A's first jobs to start")
    b_ids = await _enqueue(api, "b", path, LATE, work_s=0.0)
    a_before = len(started(path))  # B has arrived: its jobs are committed

    async def all_of_b() -> bool:
        return sum(tenant == "b" for tenant, _ in started(path)) == LATE

    await wait_for(all_of_b, timeout=120, what="B's jobs to start")
    order = started(path)
    last_b = max(n for n, (tenant, _) in enumerate(order) if tenant == "b")
    a_meanwhile = sum(tenant == "a" for tenant, _ in order[a_before:last_b])
    await wait_for(_starts(path, BACKLOG + LATE), timeout=120, what="every job to start")

    async def all_ended() -> bool:
        return await _unfinished(engine) == 0

    await wait_for(all_ended, timeout=60, what="every job to succeed")

    print(f"\nA's starts between B's arrival and B's last start: {a_meanwhile} of {BACKLOG}")
    print("".join(t for t, _ in order[a_before : last_b + 1]))
    # Ahead of B's first: what was released before it arrived (SLOTS at most); then
    # the two take turns.
    assert a_meanwhile <= LATE + 2 * SLOTS, order
    ids = [job_id for _, job_id in started(path)]
    assert sorted(ids) == sorted(a_ids + b_ids), "a job started twice, or never"
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).where(jobs.c.held_since.is_not(None))) == 0
