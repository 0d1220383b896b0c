"""Housekeeping's SQL: platform-wide statements over the jobs table. (The outbox lag
check reads the operators' read model, jobrail.persistence.ops.)"""

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import TERMINAL_STATUSES
from jobrail.persistence.errors import database_errors
from jobrail.persistence.tables import jobs


class SqlaFinishedJobs:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def delete_finished_before(self, cutoff: datetime, limit: int) -> int:
        batch = (
            select(jobs.c.id)
            .where(
                jobs.c.status.in_([status.value for status in TERMINAL_STATUSES]),
                # Implied by finished_at < cutoff; lets ix_jobs_status_created find them.
                jobs.c.created_at < cutoff,
                jobs.c.finished_at < cutoff,
            )
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        with database_errors():
            async with self._engine.begin() as conn:
                result = await conn.execute(
                    delete(jobs).where(jobs.c.id.in_(batch.scalar_subquery()))
                )
        return int(result.rowcount)
