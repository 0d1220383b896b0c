"""Fair dispatch on the real services: a worker process on RabbitMQ and Postgres, jobs
held at their enqueue and released by the worker's dispatcher.

A tenant that arrives behind another's backlog starts its jobs among that backlog, not
after it; every job runs once. Counted by the order of starts
(``tests/support/fair_starts.py``), never by time: the worker has SLOTS slots and takes
no more messages than that (its prefetch), and at most SLOTS released messages wait in
the queue, so once B has arrived each of its jobs has only a few of A's ahead of it.
First in, first out, B's ten would start after nearly all of A's.

Three tenants weighted 3, 2 and 1 (``jobrail tenants set-weight``), backlogged together
(held while the queue is paused, then resumed), start 30, 20 and 10 of every 60 jobs
while all three have jobs waiting, within 3 each."""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import dispatch_queues, jobs
from tests.support.fair_starts import module, started
from tests.support.fixtures import ApiClient, settings_from
from tests.support.processes import BIN, Process, run_jobrail
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


WEIGHTS = {"a": 3, "b": 2, "c": 1}
WINDOW = 60  # starts: 30, 20 and 10 by weight
SPREAD = 3  # each tenant's count in a window: within this of its share (10 % of 30)
EACH = 150  # every tenant's backlog: A's runs dry first, after about 300 starts
# The worker takes WEIGHTED_SLOTS at a time, and up to READY released messages wait in
# the queue ahead of each pass's: a pass's messages reach the worker after the pass has
# committed, and start in the order they were released.
WEIGHTED_SLOTS, READY = 4, 24


def _backlogged_windows(order: list[str], totals: dict[str, int]) -> list[list[str]]:
    """The windows of WINDOW consecutive starts, from the first, at whose end every
    tenant still had at least its share of a window waiting to start (none ran dry in
    them)."""
    weight = sum(WEIGHTS.values())
    windows = []
    for end in range(WINDOW, len(order) + 1, WINDOW):
        started_by_end = Counter(order[:end])
        if any(
            started_by_end[tenant] + WINDOW * WEIGHTS[tenant] // weight > total
            for tenant, total in totals.items()
        ):
            break
        windows.append(order[end - WINDOW : end])
    return windows


async def test_backlogged_tenants_start_jobs_in_proportion_to_their_weights(
    api: ApiClient,
    workers: Callable[..., Any],
    worker_env: dict[str, str],
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "starts")
    admin = await api.auth("ops", admin=True)
    for tenant, weight in WEIGHTS.items():
        await api.key_for(tenant)  # the tenant exists
        done = run_jobrail(worker_env, "tenants", "set-weight", tenant, str(weight))
        assert done.returncode == 0, done.stderr
    await workers(
        JOBRAIL_DISPATCH__READY_TARGET=str(READY),
        JOBRAIL_WORKER__MAX_ASYNC_TASKS=str(WEIGHTED_SLOTS),
        JOBRAIL_RABBIT__PREFETCH=str(WEIGHTED_SLOTS),
    )
    # Every backlog in while the queue is paused, then resumed: the three are held,
    # backlogged together, before the first job is released.
    paused = await api.post(
        "/admin/pauses", json={"scope": "queue", "value": "jobs.default"}, headers=admin
    )
    assert paused.status_code == 201, paused.text
    ids = [
        job_id
        for tenant in WEIGHTS
        for job_id in await _enqueue(api, tenant, path, EACH, work_s=0.05)
    ]
    assert started(path) == []
    resumed = await api.delete("/admin/pauses/queue/jobs.default", headers=admin)
    assert resumed.status_code == 200, resumed.text
    await wait_for(_starts(path, len(ids)), timeout=120, what="every job to start")

    order = [tenant for tenant, _ in started(path)]
    windows = _backlogged_windows(order, dict.fromkeys(WEIGHTS, EACH))
    shares = [dict(sorted(Counter(window).items())) for window in windows]
    print(f"\nstarts of each tenant in each window of {WINDOW} while all were backlogged: {shares}")
    assert len(windows) >= 3, order
    for share in shares:
        for tenant, weight in WEIGHTS.items():
            expected = WINDOW * weight // sum(WEIGHTS.values())
            assert abs(share.get(tenant, 0) - expected) <= SPREAD, (shares, "".join(order))
    assert sorted(job_id for _, job_id in started(path)) == sorted(ids)


async def test_the_scheduler_process_alone_can_run_the_dispatcher(
    api: ApiClient,
    workers: Callable[..., Any],
    worker_env: dict[str, str],
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    """JOBRAIL_DISPATCH__RUN_IN=scheduler: the workers run no dispatcher (the release's
    cost stays off them); `jobrail scheduler` releases the held jobs."""
    env = {**worker_env, "JOBRAIL_DISPATCH__RUN_IN": "scheduler"}
    await workers(**{"JOBRAIL_DISPATCH__RUN_IN": "scheduler"})
    path = str(tmp_path / "starts")
    ids = await _enqueue(api, "a", path, 30, work_s=0.0)
    async with engine.connect() as conn:
        held = await conn.scalar(select(func.count()).where(jobs.c.held_since.is_not(None)))
    assert held == 30, "no dispatcher runs yet: every job is held"

    scheduler = Process([str(BIN / "jobrail"), "scheduler"], env, name="scheduler")
    try:
        await wait_for(_starts(path, 30), timeout=60, what="the scheduler's releases")
        async with engine.connect() as conn:
            holders = (await conn.execute(select(dispatch_queues.c.holder))).scalars().all()
        assert holders, "the scheduler holds the queues' leases"
        assert all(f":{scheduler.pid}:" in holder for holder in holders), holders
    finally:
        scheduler.stop()
    assert sorted(job_id for _, job_id in started(path)) == sorted(ids)
