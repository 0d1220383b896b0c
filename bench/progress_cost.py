"""What reporting progress costs a worker: jobs/s of the runner over the Postgres store
(claim -> handler -> record, as a worker runs them, without the broker) for a handler
that reports progress 100 times against one that does not, in the same run.

Both handlers yield to the event loop 100 times (as a handler awaiting I/O between its
rows would); one also calls `ctx.progress(n, 100)` before each yield. A short job's
reports coalesce into two writes (the first at once, the last before the outcome), so
the ratio is the price of two fenced UPDATEs per job beside the claim and the record.
Rounds alternate the two, so that a noisy neighbour hits both.

python -m bench.progress_cost
"""

import asyncio
import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import create_async_engine

from bench.common import machine
from bench.jobrail_e2e import create_database
from jobrail.jobs.domain import Job, JobProgress
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.clock import SystemClock
from jobrail.kernel.ids import JobId, TenantId
from jobrail.settings import DatabaseSettings
from jobrail.store.admin import drop_database
from jobrail.store.mapping import job_row
from jobrail.store.pg_job_store import PgJobStore
from jobrail.store.pg_pool import create_pool
from jobrail.store.tables import jobs
from jobrail.worker.context import JobContext
from jobrail.worker.runner import JobRun, JobRunner, RunnerConfig

COUNT = 2000
AT_ONCE = 64
ROUNDS = 3
REPORTS = 100


class CountingStore(PgJobStore):
    progress_writes = 0

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        self.progress_writes += 1
        return await super().write_progress(job_id, claim, progress)


class NoMessages:
    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        return None

    async def publish(self, message: Outgoing) -> None:
        return None


async def plain(payload: Mapping[str, Any], ctx: JobContext) -> None:
    for _ in range(REPORTS):
        await asyncio.sleep(0)


async def reporting(payload: Mapping[str, Any], ctx: JobContext) -> None:
    for n in range(1, REPORTS + 1):
        await ctx.progress(n, REPORTS)
        await asyncio.sleep(0)


async def _insert(engine: Any, count: int) -> list[Job]:
    now = datetime.now(UTC)
    made = [
        Job.create(
            id=JobId(uuid.uuid4()),
            type="bench.progress",
            queue="jobs.default",
            tenant_id=TenantId("bench"),
            payload={"n": n},
            max_attempts=3,
            now=now,
        )
        for n in range(count)
    ]
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE jobs CASCADE"))
        await conn.execute(insert(jobs), [job_row(job) for job in made])
    return made


async def _drain(runner: JobRunner, made: list[Job], handler: Any) -> float:
    run = JobRun(handler, timedelta(seconds=30))
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for job in made:
        queue.put_nowait(job)

    async def worker() -> None:
        while not queue.empty():
            job = queue.get_nowait()
            message = JobMessage(job.id, job.type, job.queue, job.tenant_id, str(job.id))
            await runner.run(message, run)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(AT_ONCE)))
    return len(made) / (time.perf_counter() - started)


async def run(count: int = COUNT, rounds: int = ROUNDS) -> dict[str, Any]:
    url = await create_database()
    engine = create_async_engine(url)
    pool = await create_pool(DatabaseSettings(url=url))  # type: ignore[arg-type]
    store = CountingStore(pool, window_s=0.001)  # the worker's default batch window
    nothing = NoMessages()
    runner = JobRunner(
        store,
        nothing,
        nothing,
        SystemClock(),
        RetryPolicy(base_s=1, cap_s=60),
        RunnerConfig("jobs.dlq", timedelta(seconds=10), timedelta(seconds=5)),
    )
    measured: dict[str, list[float]] = {"plain": [], "progress": []}
    writes = 0
    try:
        for _ in range(rounds):
            for name, handler in (("plain", plain), ("progress", reporting)):
                made = await _insert(engine, count)
                before = store.progress_writes
                measured[name].append(await _drain(runner, made, handler))
                writes += store.progress_writes - before
    finally:
        await pool.close()
        await engine.dispose()
        await drop_database(url)
    plain_rate = statistics.median(measured["plain"])
    progress_rate = statistics.median(measured["progress"])
    return {
        "jobs_per_s": {"plain": round(plain_rate), "progress": round(progress_rate)},
        "ratio_progress_to_plain": round(progress_rate / plain_rate, 2),
        "progress_writes_per_job": round(writes / (count * rounds), 2),
        "reports_per_job": REPORTS,
        "rounds": {name: [round(r) for r in rates] for name, rates in measured.items()},
        "machine": machine(),
    }


if __name__ == "__main__":
    print(asyncio.run(run()))
