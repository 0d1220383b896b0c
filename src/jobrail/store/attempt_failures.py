"""Failed attempts' errors and tracebacks in ``job_attempt_failures``
(jobrail.worker.failures.AttemptFailures): one insert per failed attempt, and a job's
read back by ix_job_attempt_failures_job_id."""

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import JobId
from jobrail.store.errors import database_errors
from jobrail.store.tables import job_attempt_failures as failures
from jobrail.worker.failures import AttemptFailure


class SqlaAttemptFailures:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(self, failure: AttemptFailure) -> None:
        row = {
            "job_id": failure.job_id,
            "attempt": failure.attempt,
            "at": failure.at,
            "error": failure.error,
            "traceback": failure.traceback,
        }
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(insert(failures).values(row))

    async def of_job(self, job_id: JobId, limit: int) -> list[AttemptFailure]:
        query = (
            select(failures.c.attempt, failures.c.at, failures.c.error, failures.c.traceback)
            .where(failures.c.job_id == job_id)
            .order_by(failures.c.id)
            .limit(limit)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [AttemptFailure(job_id, *row) for row in rows]
