"""Operators' reads over every tenant: job counts, recent failures, outbox lag, recent
batches and chains, and the console's job list."""

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.flow import Flow
from jobrail.jobs.operator_reads import JobCount
from jobrail.jobs.ports import Cursor
from jobrail.ops.job_search import JobSearchFilter
from jobrail.store.errors import database_errors
from jobrail.store.flows import flow_from_row, member_counts
from jobrail.store.mapping import job_from_row
from jobrail.store.tables import FAILED, LIVE, flows, jobs, outbox

# The jobs not ended yet, through the partial index ix_jobs_live alone (the predicate said
# as the index says it); the ended ones come from the overview's samples.
LIVE_COUNTS = (
    select(jobs.c.type, jobs.c.status, func.count())
    .where(LIVE)
    .group_by(jobs.c.type, jobs.c.status)
    .order_by(jobs.c.type, jobs.c.status)
)


def failures_query(limit: int) -> Select[Any]:
    """The newest failures: ix_jobs_failed_finished, read backwards up to the limit."""
    return select(jobs).where(FAILED).order_by(jobs.c.finished_at.desc()).limit(limit)


class SqlaOpsReadModel:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def job_counts(self) -> list[JobCount]:
        query = LIVE_COUNTS
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [JobCount(type=t, status=JobStatus(s), count=int(n)) for t, s, n in rows]

    async def recent_failures(self, limit: int) -> list[Job]:
        query = failures_query(limit)
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

    async def recent_flows(self, limit: int) -> list[tuple[Flow, dict[JobStatus, int]]]:
        # Served by ix_flows_created, and the counts by ix_jobs_flow: one query each.
        query = select(flows).order_by(flows.c.created_at.desc(), flows.c.id.desc()).limit(limit)
        with database_errors():
            async with self._engine.connect() as conn:
                found = [flow_from_row(row) for row in (await conn.execute(query)).mappings()]
                rows = (await conn.execute(member_counts([f.id for f in found]))).all()
        counts: dict[uuid.UUID, dict[JobStatus, int]] = {flow.id: {} for flow in found}
        for flow_id, status, count in rows:
            counts[flow_id][JobStatus(status)] = count
        return [(flow, counts[flow.id]) for flow in found]


class SqlaJobSearch:
    """The console's job list. Every page is one query ordered by (created_at, id) with a
    LIMIT, served by an index that starts with the filter's column: the primary key for
    an id; ix_jobs_idempotency_key and ix_jobs_unique_key (partial: keyed jobs only) for a
    key; then ix_jobs_tenant_entity_created for an entity (always with its tenant),
    ix_jobs_tenant_status_created, ix_jobs_tenant_created,
    ix_jobs_status_created, ix_jobs_type_created, ix_jobs_queue_created, and with no
    filter ix_jobs_created_id. Postgres reads them backwards from the cursor and stops at
    the LIMIT; a time range bounds the same read. (tests/integration/test_ops_jobs_pg.py
    checks the plans on Postgres.)"""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def search(self, where: JobSearchFilter, limit: int, after: Cursor | None) -> list[Job]:
        query = self.query(where, limit, after)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).mappings().all()
        return [job_from_row(row) for row in rows]

    @staticmethod
    def query(where: JobSearchFilter, limit: int, after: Cursor | None) -> Select[Any]:
        query = select(jobs)
        for column, value in (
            (jobs.c.id, where.job_id),
            (jobs.c.status, where.status.value if where.status else None),
            (jobs.c.type, where.type),
            (jobs.c.tenant_id, where.tenant_id),
            (jobs.c.entity_id, where.entity_id),
            (jobs.c.queue, where.queue),
        ):
            if value is not None:
                query = query.where(column == value)
        if where.key is not None:
            query = query.where(
                or_(jobs.c.idempotency_key == where.key, jobs.c.unique_key == where.key)
            )
        if where.created_from is not None:
            query = query.where(jobs.c.created_at >= where.created_from)
        if where.created_to is not None:
            query = query.where(jobs.c.created_at < where.created_to)
        if after is not None:
            # `<=` first, so that the index is read from the cursor on; the OR only
            # drops the rows of the cursor's own instant up to its job.
            query = query.where(
                jobs.c.created_at <= after.created_at,
                or_(
                    jobs.c.created_at < after.created_at,
                    and_(jobs.c.created_at == after.created_at, jobs.c.id < after.job_id),
                ),
            )
        return query.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)
