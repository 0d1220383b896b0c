"""A unit of work's fenced records (`save_held`, `save_held_many`, what a batch
member's end goes through), on SQLite and Postgres: written only while the job still
runs the claim's attempt; a stale claim writes nothing and says so."""

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.ports import ClaimToken
from jobrail.store.engine import create_sessionmaker
from jobrail.store.jobs import SqlaJobRepository
from jobrail.store.mapping import job_from_row
from jobrail.store.tables import jobs
from tests.support.services import store_engine


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine: AsyncEngine = await store_engine(request, tmp_path, "jobs, job_events")
    yield engine
    await engine.dispose()


@pytest.mark.parametrize("count", [1, 4])
async def test_only_the_claims_still_held_are_written(engine: AsyncEngine, count: int) -> None:
    started = datetime.now(UTC).replace(microsecond=0)
    ids = [uuid.uuid4() for _ in range(count + 1)]
    async with engine.begin() as conn:
        for job_id in ids:
            await conn.execute(
                insert(jobs).values(
                    id=job_id,
                    tenant_id="t",
                    type="demo.echo",
                    queue="jobs.default",
                    status="running",
                    payload={},
                    max_attempts=3,
                    trace_context={},
                    created_at=started,
                    updated_at=started,
                    attempts=1,
                    started_at=started,
                )
            )
        rows = (await conn.execute(select(jobs).where(jobs.c.id.in_(ids)))).mappings().all()
    held = {row["id"]: job_from_row(row) for row in rows}
    ended = started + timedelta(seconds=2)
    records = []
    for i, job_id in enumerate(ids):
        job = held[job_id]
        job.succeed({"n": i, "text": "é\u2028"}, ended)
        stale = i == count  # the last one was taken over: its claim is another attempt's
        records.append((job, ClaimToken(attempt=2 if stale else 1, started_at=started)))

    async with create_sessionmaker(engine)() as session:
        repository = SqlaJobRepository(session)
        if count == 1:
            written = [await repository.save_held(job, claim) for job, claim in records]
        else:
            written = list(await repository.save_held_many(records))
        await session.commit()

    assert written == [True] * count + [False]
    async with engine.connect() as conn:
        found = {
            row["id"]: row
            for row in (await conn.execute(select(jobs).where(jobs.c.id.in_(ids)))).mappings()
        }
    for i, job_id in enumerate(ids[:count]):
        assert found[job_id]["status"] == "succeeded"
        assert found[job_id]["result"] == {"n": i, "text": "é\u2028"}
        assert found[job_id]["finished_at"] == ended
    assert found[ids[-1]]["status"] == "running"
    assert found[ids[-1]]["result"] is None
