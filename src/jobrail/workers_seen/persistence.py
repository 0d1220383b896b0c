"""The workers table: one upsert per beat of each process."""

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import RowMapping, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.dialects import upsert_insert
from jobrail.store.errors import database_errors
from jobrail.store.tables import workers
from jobrail.workers_seen.model import WorkerBeat


class SqlaWorkerBook:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def beat(self, worker: WorkerBeat) -> None:
        row = {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "version": worker.version,
            "queues": list(worker.queues),
            "concurrency": worker.concurrency,
            "running": list(worker.running),
            "started_at": worker.started_at,
            "beat_at": worker.beat_at,
            "stopped_at": None,
        }
        statement = upsert_insert(self._engine.dialect.name, workers).values(row)
        changing = ("running", "beat_at", "stopped_at", "queues", "concurrency")
        statement = statement.on_conflict_do_update(
            index_elements=["id"],
            set_={name: statement.excluded[name] for name in changing},
        )
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(statement)

    async def stopped(self, worker_id: str, at: datetime) -> None:
        statement = (
            update(workers).where(workers.c.id == worker_id).values(stopped_at=at, running=[])
        )
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(statement)

    async def all(self) -> Sequence[WorkerBeat]:
        statement = select(workers).order_by(workers.c.started_at.desc(), workers.c.id)
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(statement)).mappings().all()
        return [_worker(row) for row in rows]

    async def delete_quiet_before(self, cutoff: datetime) -> int:
        last_heard = func.coalesce(workers.c.stopped_at, workers.c.beat_at)
        with database_errors():
            async with self._engine.begin() as conn:
                result = await conn.execute(delete(workers).where(last_heard < cutoff))
        return int(result.rowcount)


def _worker(row: RowMapping) -> WorkerBeat:
    return WorkerBeat(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        version=row["version"],
        queues=tuple(row["queues"] or ()),
        concurrency=row["concurrency"],
        running=tuple(row["running"] or ()),
        started_at=row["started_at"],
        beat_at=row["beat_at"],
        stopped_at=row["stopped_at"],
    )
