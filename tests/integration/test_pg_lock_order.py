"""The Postgres job store's wait notes never wait for a job's row lock, so they cannot
deadlock with the claims of the same jobs.

Seen under load before: a worker's wait notes (one UPDATE over the jobs its limits
turned away) and another worker's claims locked the same two jobs in opposite orders,
and Postgres ended one of them. Without SKIP LOCKED this test's holder deadlocks with
the notes."""

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from jobrail.jobs.domain import Job, Wait, WaitsOn
from jobrail.settings import DatabaseSettings
from jobrail.store.jobs import SqlaJobRepository
from jobrail.store.pg_job_store import PgJobStore
from jobrail.store.pg_pool import create_pool
from jobrail.worker.job_store import WaitNote
from tests.fakes import START, make_job
from tests.support.services import store_engine


@pytest.fixture(params=["postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine: AsyncEngine = await store_engine(request, tmp_path, "jobs CASCADE")
    yield engine
    await engine.dispose()


@pytest.fixture
async def store(engine: AsyncEngine) -> AsyncIterator[PgJobStore]:
    pool = await create_pool(DatabaseSettings(url=engine.url.render_as_string(False)))
    yield PgJobStore(pool)
    await pool.close()


async def _two_jobs(engine: AsyncEngine) -> tuple[Job, Job]:
    """Two pending jobs, the one with the lower id first."""
    low, high = sorted((make_job(), make_job()), key=lambda job: job.id)
    async with AsyncSession(engine) as session:
        for job in (low, high):
            await SqlaJobRepository(session).add(job)
        await session.commit()
    return low, high


async def test_wait_notes_pass_by_a_job_another_transaction_holds(
    engine: AsyncEngine, store: PgJobStore
) -> None:
    low, high = await _two_jobs(engine)
    later = START + timedelta(seconds=1)
    wait = Wait((WaitsOn("rate_limit", "vendor", "v:acme"),), later + timedelta(seconds=5), later)
    holder = await asyncpg.connect(engine.url.set(drivername="postgresql").render_as_string(False))
    try:
        async with holder.transaction():
            # A claim (or a release) of `low` under way, which next wants `high`.
            await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", low.id)
            notes = [WaitNote(job.id, wait, later) for job in (high, low)]
            await asyncio.wait_for(store.note_waits(notes), 5)  # waits for nothing
            await holder.execute("SET LOCAL lock_timeout = '5s'")
            await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", high.id)
    finally:
        await holder.close()

    async with AsyncSession(engine) as session:
        repository = SqlaJobRepository(session)
        noted, passed_by = await repository.get(high.id), await repository.get(low.id)
    assert noted is not None
    assert noted.waiting == wait
    assert passed_by is not None
    assert passed_by.waiting is None  # advice: noted again at its next deferral
