"""Operators' reads over every tenant: job counts, recent failures, outbox lag."""

from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.ports import JobCount
from jobrail.persistence.errors import database_errors
from jobrail.persistence.mapping import job_from_row
from jobrail.persistence.tables import jobs, outbox


class SqlaOpsReadModel:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def job_counts(self) -> list[JobCount]:
        query = (
            select(jobs.c.type, jobs.c.status, func.count())
            .group_by(jobs.c.type, jobs.c.status)
            .order_by(jobs.c.type, jobs.c.status)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [JobCount(type=t, status=JobStatus(s), count=int(n)) for t, s, n in rows]

    async def recent_failures(self, limit: int) -> list[Job]:
        query = (
            select(jobs)
            .where(jobs.c.status == JobStatus.FAILED.value)
            .order_by(jobs.c.finished_at.desc())
            .limit(limit)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).mappings().all()
        return [job_from_row(row) for row in rows]

    async def oldest_unpublished(self) -> datetime | None:
        # Served by the partial index on created_at WHERE published_at IS NULL.
        query = select(func.min(outbox.c.created_at)).where(outbox.c.published_at.is_(None))
        with database_errors():
            async with self._engine.connect() as conn:
                oldest: datetime | None = await conn.scalar(query)
        if oldest is not None and oldest.tzinfo is None:  # an aggregate skips UtcDateTime
            oldest = oldest.replace(tzinfo=UTC)
        return oldest
