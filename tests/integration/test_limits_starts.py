"""What a vendor behind a token bucket sees: the moments its handlers start.

A bucket of capacity C refilled at R a second promises that in any window of T seconds
at most C + R * T calls reach the vendor. The bucket decides in Redis (or in memory);
the call starts later, after the job's claim in the database. Here the database stalls
for a while in the middle of a burst (its rows locked, as a busy database or a long
transaction holds them), so that jobs the bucket let in wait at their claim and would
all start together once it answers. Counted where the vendor would count: the first line
of the handler (``tests/support/bucket_starts.py``).

Nothing here depends on the machine's speed: a slower machine starts jobs later and
sparser, which can only help the bound; every wait is bounded.
"""

import asyncio
import bisect
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail import JobRail
from jobrail.jobs.intake import EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.settings import Settings
from jobrail.store.tables import jobs as jobs_table
from tests.support.bucket_starts import CAPACITY, PER_SECOND, module, starts
from tests.support.fixtures import ApiClient, settings_from
from tests.support.redis_cluster import REDIS_KINDS, redis_env

JOBS = 60  # 11 s of starts at 5 a second after the burst: windows of 10 s fit
STALL_S = 1.5
WINDOWS_S = (1, 2, 5, 10)
WAIT_S = 90.0


def busiest(times: list[float], window_s: float) -> int:
    """The most starts in any window [t, t + window_s)."""
    times = sorted(times)
    return max(
        (bisect.bisect_left(times, t + window_s) - i for i, t in enumerate(times)), default=0
    )


def over_the_bound(times: list[float]) -> dict[float, tuple[int, float]]:
    """The windows whose busiest stretch has more starts than capacity + rate * T."""
    seen = {t: (busiest(times, t), CAPACITY + PER_SECOND * t) for t in WINDOWS_S}
    print(f"\nbusiest windows (starts, capacity + rate * T) by T: {seen}")
    return {t: counts for t, counts in seen.items() if counts[0] > counts[1]}


async def _until_started(path: str, count: int) -> list[float]:
    while len(times := starts(path)) < count:
        await asyncio.sleep(0.02)
    return times


async def _stall_then_wait(path: str, stall: Callable[[], Any]) -> list[float]:
    """Once the burst has started, stall the database for STALL_S; then wait for every
    job's start."""
    async with asyncio.timeout(WAIT_S):
        await _until_started(path, int(CAPACITY))
        await stall()
        return await _until_started(path, JOBS)


# -- stack mode: worker processes, RabbitMQ, Postgres, Redis (single and cluster) ----------


@pytest.fixture(params=REDIS_KINDS)
def worker_env(stack_env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": "tests.support.bucket_starts:rail",
        "JOBRAIL_API_LIMITS__ENABLED": "false",
        **redis_env(request.param, request),
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


async def test_a_stalled_database_does_not_bunch_the_starts_of_a_bucket_s_jobs(
    api: ApiClient, workers: Callable[..., Any], engine: AsyncEngine, tmp_path: Path
) -> None:
    for n in range(2):
        await workers(f"worker-{n}")
    path = str(tmp_path / "starts")
    ids = await asyncio.gather(
        *(api.enqueue("test.bucket_start", {"path": path, "n": n}) for n in range(JOBS))
    )

    async def stall() -> None:
        # The jobs' rows locked: a claim waits as it would behind a long transaction.
        async with engine.begin() as conn:
            wanted = [uuid.UUID(i) for i in ids]
            await conn.execute(
                select(jobs_table.c.id).where(jobs_table.c.id.in_(wanted)).with_for_update()
            )
            await asyncio.sleep(STALL_S)

    times = await _stall_then_wait(path, stall)

    assert len(times) == JOBS, "a job started twice"
    assert over_the_bound(times) == {}, "more starts than capacity + rate * T"
    async with asyncio.timeout(WAIT_S):
        finished = [await api.wait_status(i, "succeeded", timeout=WAIT_S) for i in ids]
    assert {job["attempts"] for job in finished} == {1}, "waiting must not spend attempts"


# -- embedded mode: the in-process worker, SQLite, the memory backend ---------------------


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[tuple[JobRail, Path]]:
    database = tmp_path / "jobrail.db"
    settings = Settings(
        mode="embedded",
        environment="test",
        database={"url": f"sqlite+aiosqlite:///{database}"},
        modules=[],
        scheduler={"embedded": False},
    )
    rail = JobRail(settings, modules=[module])
    await rail.migrate()
    async with rail.lifespan():
        yield rail, database


def _hold_write_lock(database: Path, seconds: float) -> None:
    connection = sqlite3.connect(database, timeout=30)
    try:
        connection.execute("BEGIN IMMEDIATE")  # every other writer waits (busy_timeout)
        time.sleep(seconds)
        connection.rollback()
    finally:
        connection.close()


async def test_in_embedded_mode_a_stalled_database_does_not_bunch_the_starts_either(
    embedded: tuple[JobRail, Path], tmp_path: Path
) -> None:
    rail, database = embedded
    path = str(tmp_path / "starts")
    await asyncio.gather(
        *(
            rail.enqueue(
                EnqueueJobCommand(TenantId("acme"), "test.bucket_start", {"path": path, "n": n})
            )
            for n in range(JOBS)
        )
    )

    async def stall() -> None:
        await asyncio.to_thread(_hold_write_lock, database, STALL_S)

    times = await _stall_then_wait(path, stall)

    assert len(times) == JOBS, "a job started twice"
    assert over_the_bound(times) == {}, "more starts than capacity + rate * T"
    async with asyncio.timeout(WAIT_S):
        while len(attempts := _succeeded_attempts(database)) < JOBS:
            await asyncio.sleep(0.05)  # the last jobs' outcomes are being recorded
    assert set(attempts) == {1}, "waiting must not spend attempts"


def _succeeded_attempts(database: Path) -> list[int]:
    """The attempts of each job that succeeded so far."""
    connection = sqlite3.connect(database, timeout=30)
    try:
        rows = connection.execute("SELECT attempts FROM jobs WHERE status = 'succeeded'")
        return [row[0] for row in rows]
    finally:
        connection.close()
