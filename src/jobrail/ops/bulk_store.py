"""The bulk actions' reads over the jobs table (`jobrail.ops.bulk.BulkJobs`): a count
that stops at its cap, and the failed jobs a filter takes in keyset pages, oldest first.
Both filter on the status first, which ix_jobs_status_created (with a tenant,
ix_jobs_tenant_status_created) serves in creation order, and stop at their LIMIT."""

from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import JobStatus
from jobrail.jobs.ports import CancelFilter, Cursor
from jobrail.kernel.ids import JobId
from jobrail.store.errors import database_errors
from jobrail.store.tables import jobs


class SqlaBulkJobs:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def count(self, where: CancelFilter, cap: int, *, cancellable: bool) -> int:
        taken = _taken(select(jobs.c.id), where)
        if cancellable:
            taken = taken.where(jobs.c.cancel_requested.is_(False))
        query = select(func.count()).select_from(taken.limit(cap).subquery())
        with database_errors():
            async with self._engine.connect() as conn:
                return int(await conn.scalar(query) or 0)

    async def failed(self, where: CancelFilter, limit: int, after: Cursor | None) -> list[Cursor]:
        query = _taken(select(jobs.c.created_at, jobs.c.id), where).where(
            jobs.c.status == JobStatus.FAILED.value
        )
        if after is not None:
            query = query.where(
                jobs.c.created_at >= after.created_at,
                or_(
                    jobs.c.created_at > after.created_at,
                    and_(jobs.c.created_at == after.created_at, jobs.c.id > after.job_id),
                ),
            )
        query = query.order_by(jobs.c.created_at, jobs.c.id).limit(limit)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [Cursor(created_at=at, job_id=JobId(job_id)) for at, job_id in rows]


def _taken(query: Select[Any], where: CancelFilter) -> Select[Any]:
    query = query.where(jobs.c.status.in_([status.value for status in where.statuses]))
    for column, value in (
        (jobs.c.tenant_id, where.tenant_id),
        (jobs.c.type, where.type),
        (jobs.c.entity_id, where.entity_id),
    ):
        if value is not None:
            query = query.where(column == value)
    if where.created_before is not None:
        query = query.where(jobs.c.created_at < where.created_before)
    return query
