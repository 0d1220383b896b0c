"""The overview's samples on SQLAlchemy (Postgres or SQLite), and the reads of jobs they
are taken from. Each read of jobs is bounded by an index: ``ix_jobs_finished`` and
``ix_jobs_started`` by a minute's range, ``ix_jobs_live`` by the jobs not ended yet
(tests/integration/test_ops_overview_pg.py checks the plans on Postgres)."""

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, delete, func, not_, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.maintenance.sample import FINISHED, WAITING, Sample
from jobrail.store.dialects import upsert_insert
from jobrail.store.errors import database_errors
from jobrail.store.tables import FINISHED as FINISHED_ROWS
from jobrail.store.tables import LIVE, STARTED, jobs, ops_samples

# Said as the partial index says it (a literal), so that every plan can use ix_jobs_live.
WAITING_ROWS = text("status IN ('pending', 'retrying')")
BATCH = 500


class SqlaOverviewSamples:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def finished_in(self, start: datetime, end: datetime) -> list[tuple[str, str, int]]:
        query = (
            select(jobs.c.type, jobs.c.status, func.count())
            .where(FINISHED_ROWS, jobs.c.finished_at >= start, jobs.c.finished_at < end)
            .group_by(jobs.c.type, jobs.c.status)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [(job_type, status, int(n)) for job_type, status, n in rows]

    async def start_delays(self, start: datetime, end: datetime) -> list[float]:
        query = select(jobs.c.started_at, jobs.c.created_at, jobs.c.run_after).where(
            STARTED, jobs.c.started_at >= start, jobs.c.started_at < end
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [
            max((started - (run_after or created)).total_seconds(), 0.0)
            for started, created, run_after in rows
        ]

    async def waiting_by_queue(self) -> dict[str, int]:
        query = select(jobs.c.queue, func.count()).where(LIVE, WAITING_ROWS).group_by(jobs.c.queue)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return {queue: int(n) for queue, n in rows}

    async def newest_minute(self) -> datetime | None:
        query = select(ops_samples.c.minute).order_by(ops_samples.c.minute.desc()).limit(1)
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
        m = ops_samples.c
        query = select(m.metric, m.minute, m.label, m.value).where(
            m.metric.in_(metrics), m.minute >= since
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [Sample(metric, minute, label, value) for metric, minute, label, value in rows]

    async def finished_totals(self, since: datetime, until: datetime) -> dict[str, float]:
        m = ops_samples.c
        query = (
            select(m.label, func.sum(m.value))
            .where(m.metric == FINISHED, m.minute >= since, m.minute < until)
            .group_by(m.label)
        )
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
