"""Housekeeping's SQL: platform-wide statements over the jobs, flows, outbox and inbox
tables.
(The outbox lag check reads the operators' read model, jobrail.ops.persistence.)

Each delete takes one batch of ids and deletes them in one short transaction; rows
another transaction holds are skipped (SKIP LOCKED, on Postgres) and go next time.
"""

from datetime import datetime

from sqlalchemy import Delete, Select, delete, exists, select, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import TERMINAL_STATUSES
from jobrail.store.errors import database_errors
from jobrail.store.tables import flows, inbox, jobs, outbox


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
        return await _delete(
            self._engine, delete(jobs).where(jobs.c.id.in_(batch.scalar_subquery()))
        )


class SqlaFinishedFlows:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def delete_finished_before(self, cutoff: datetime, limit: int) -> int:
        # A flow's row is what its jobs' pages and GET /batches/{id} read: it stays while
        # any of its jobs does (a callback that finished after it, say).
        batch = (
            select(flows.c.id)
            .where(
                flows.c.finished_at < cutoff,
                ~exists().where(jobs.c.flow_id == flows.c.id),
            )
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return await _delete(self._engine, delete(flows).where(flows.c.id.in_(batch)))


class SqlaPublishedOutbox:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def delete_published_before(self, cutoff: datetime, limit: int) -> int:
        # An unpublished row has published_at NULL, which no comparison matches: it stays.
        batch = (
            select(outbox.c.id)
            .where(outbox.c.published_at < cutoff)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return await _delete(self._engine, delete(outbox).where(outbox.c.id.in_(batch)))


class SqlaProcessedInbox:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def delete_processed_before(self, cutoff: datetime, limit: int) -> int:
        batch: Select[tuple[str, str]] = (
            select(inbox.c.consumer, inbox.c.message_id)
            .where(inbox.c.processed_at < cutoff)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        key = tuple_(inbox.c.consumer, inbox.c.message_id)
        return await _delete(self._engine, delete(inbox).where(key.in_(batch)))


async def _delete(engine: AsyncEngine, statement: Delete) -> int:
    with database_errors():
        async with engine.begin() as conn:
            result = await conn.execute(statement)
    return int(result.rowcount)
