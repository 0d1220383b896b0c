"""Operators' reads over every tenant: job counts, recent failures, outbox lag, recent
batches and chains, webhooks and their deliveries."""

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.ports import JobCount
from jobrail.kernel.ids import TenantId
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row
from jobrail.store.tables import WEBHOOK_DELIVERIES, flows, jobs, outbox, webhooks
from jobrail.workflows.model import Flow
from jobrail.workflows.persistence import flow_from_row, member_counts


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


class SqlaWebhookOpsReads:
    """jobrail.webhooks.ports.WebhookOpsReads. The deliveries are read by
    ix_jobs_webhook_deliveries (its predicate, as a literal), never by their type as a
    parameter; of webhooks, the URL alone is ever selected."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def webhook_counts(self) -> dict[TenantId, int]:
        query = (
            select(webhooks.c.tenant_id, func.count())
            .where(webhooks.c.deleted_at.is_(None))
            .group_by(webhooks.c.tenant_id)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return {TenantId(tenant): int(n) for tenant, n in rows}

    async def delivery_counts(self, since: datetime) -> list[tuple[TenantId, JobStatus, int]]:
        groups: tuple[ColumnElement[Any], ...] = (jobs.c.tenant_id, jobs.c.status)
        if self._engine.dialect.name == "sqlite":
            # SQLite (never analyzed here) would rather scan all of an index that gives
            # the groups in order than sort the day's few; unary + keeps it off those.
            groups = (literal_column("+jobs.tenant_id"), literal_column("+jobs.status"))
        query = (
            select(jobs.c.tenant_id, jobs.c.status, func.count())
            .where(WEBHOOK_DELIVERIES, jobs.c.created_at >= since)
            .group_by(*groups)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [(TenantId(t), JobStatus(s), int(n)) for t, s, n in rows]

    async def failed_deliveries(self, since: datetime, limit: int) -> list[tuple[Job, str | None]]:
        query = (
            select(jobs)
            .where(
                WEBHOOK_DELIVERIES,
                jobs.c.created_at >= since,
                jobs.c.status == JobStatus.FAILED.value,
            )
            .order_by(jobs.c.created_at.desc())
            .limit(limit)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                found = [job_from_row(row) for row in (await conn.execute(query)).mappings()]
                hook_ids = {hook for job in found if (hook := _webhook_id(job)) is not None}
                urls: dict[uuid.UUID, str] = {}
                if hook_ids:
                    query = select(webhooks.c.id, webhooks.c.url).where(webhooks.c.id.in_(hook_ids))
                    urls = {row.id: row.url for row in await conn.execute(query)}
        return [(job, urls.get(hook) if (hook := _webhook_id(job)) else None) for job in found]


def _webhook_id(job: Job) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(job.payload["webhook_id"]))
    except (KeyError, ValueError):
        return None
