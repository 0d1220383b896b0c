"""The scheduler's fired periods as the jobs table holds them (ScheduleFires)."""

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import Job
from jobrail.scheduler.schedule import SYSTEM_TENANT
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row
from jobrail.store.tables import jobs


class SqlaScheduleFires:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def last_fired(self, schedule: str) -> Job | None:
        # One row from ix_jobs_tenant_entity_created: a fired period's job is the
        # _system tenant's, with the schedule's name as its entity.
        query = (
            select(jobs)
            .where(jobs.c.tenant_id == SYSTEM_TENANT, jobs.c.entity_id == schedule)
            .order_by(jobs.c.created_at.desc())
            .limit(1)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                row = (await conn.execute(query)).mappings().first()
        return None if row is None else job_from_row(row)
