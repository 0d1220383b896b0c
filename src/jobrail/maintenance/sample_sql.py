"""The overview's samples on SQLAlchemy (Postgres or SQLite), and the reads of jobs they
are taken from. Each read of jobs is bounded by an index: ``ix_jobs_finished`` and
``ix_jobs_started`` by a minute's range, ``ix_jobs_live`` by the jobs not ended yet
(tests/integration/test_ops_overview_pg.py checks the plans on Postgres)."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, delete, func, not_, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.maintenance.sample import FINISHED, WAITING, Sample
from jobrail.store.dialects import upsert_insert
from jobrail.store.errors import database_errors
from jobrail.store.tables import FINISHED as FINISHED_ROWS
from jobrail.store.tables import LIVE, STARTED, jobs, ops_samples

# Said as the partial index says it (a literal), so that every plan can use ix_jobs_live.
WAITING_ROWS = text("status IN ('pending', 'retrying')")
BATCH = 500


def finished_query(start: datetime, end: datetime) -> Select[Any]:
    """Jobs finished in [start, end) by type and status: ix_jobs_finished alone."""
    return (
        select(jobs.c.type, jobs.c.status, func.count())
        .where(FINISHED_ROWS, jobs.c.finished_at >= start, jobs.c.finished_at < end)
        .group_by(jobs.c.type, jobs.c.status)
    )


def started_query(start: datetime, end: datetime) -> Select[Any]:
    """Jobs started in [start, end), with when they could run: ix_jobs_started alone (the
    times it needs are in the index)."""
    return select(jobs.c.started_at, jobs.c.created_at, jobs.c.run_after).where(
        STARTED, jobs.c.started_at >= start, jobs.c.started_at < end
    )


WAITING_BY_QUEUE = (
    select(jobs.c.queue, func.count()).where(LIVE, WAITING_ROWS).group_by(jobs.c.queue)
)


def samples_query(metrics: Sequence[str], since: datetime) -> Select[Any]:
    m = ops_samples.c
    return select(m.metric, m.minute, m.label, m.value).where(
        m.metric.in_(metrics), m.minute >= since
    )


def totals_query(since: datetime, until: datetime) -> Select[Any]:
    m = ops_samples.c
    return (
        select(m.label, func.sum(m.value))
        .where(m.metric == FINISHED, m.minute >= since, m.minute < until)
        .group_by(m.label)
    )


NEWEST_MINUTE = select(ops_samples.c.minute).order_by(ops_samples.c.minute.desc()).limit(1)


class SqlaOverviewSamples:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def finished_in(self, start: datetime, end: datetime) -> list[tuple[str, str, int]]:
        query = finished_query(start, end)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [(job_type, status, int(n)) for job_type, status, n in rows]

    async def start_delays(self, start: datetime, end: datetime) -> list[float]:
        query = started_query(start, end)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [
            max((started - (run_after or created)).total_seconds(), 0.0)
            for started, created, run_after in rows
        ]

    async def waiting_by_queue(self) -> dict[str, int]:
        query = WAITING_BY_QUEUE
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return {queue: int(n) for queue, n in rows}

    async def newest_minute(self) -> datetime | None:
        query = NEWEST_MINUTE
        with database_errors():
            async with self._engine.connect() as conn:
                newest: datetime | None = await conn.scalar(query)
        return newest

    async def replace(self, first: datetime, last: datetime, samples: Sequence[Sample]) -> None:
        m = ops_samples.c
        stale = delete(ops_samples).where(
            m.minute >= first,
            m.minute <= last,
            not_(and_(m.metric == WAITING, m.minute < last)),
        )
        rows = [
            {"metric": s.metric, "minute": s.minute, "label": s.label, "value": s.value}
            for s in samples
        ]
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(stale)
                for start in range(0, len(rows), BATCH):
                    # An upsert: a sampling run on another worker at the same time writes
                    # the same rows.
                    insert = upsert_insert(self._engine.dialect.name, ops_samples)
                    insert = insert.values(rows[start : start + BATCH])
                    insert = insert.on_conflict_do_update(
                        index_elements=["metric", "minute", "label"],
                        set_={"value": insert.excluded.value},
                    )
                    await conn.execute(insert)

    async def read(self, metrics: Sequence[str], since: datetime) -> list[Sample]:
        query = samples_query(metrics, since)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [Sample(metric, minute, label, value) for metric, minute, label, value in rows]

    async def finished_totals(self, since: datetime, until: datetime) -> dict[str, float]:
        query = totals_query(since, until)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return {label: float(total) for label, total in rows}

    async def delete_before(self, cutoff: datetime) -> int:
        with database_errors():
            async with self._engine.begin() as conn:
                result = await conn.execute(
                    delete(ops_samples).where(ops_samples.c.minute < cutoff)
                )
        return int(result.rowcount)
