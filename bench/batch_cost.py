"""What a batch costs against plain jobs: a 1,000-job batch against 1,000 jobs enqueued
one by one, started and then run, in the same run.

Start: one `FlowService.batch` of 1,000 members and a `then` callback (one SQLAlchemy
transaction: the flow's row, 1,001 jobs, 1,000 outbox rows, then the fast-path publish)
against 1,000 `EnqueueJob` calls over the Postgres intake, 64 at a time (group commit,
each dispatched on the fast path), as `bench.jobrail_e2e` enqueues. Both run in one API
runtime against RabbitMQ (the messages stay queued; nothing consumes them).

Run: the runner over the Postgres store (claim -> no-op handler -> record, 64 jobs at a
time, the worker's 1 ms batch window, no broker), as `bench.progress_cost` runs it: the
batch's members through `FlowRecordingStore` (as `jobrail.runtime.container` gives the
runner for flows: each end is one transaction that locks the flow's row, records the
member and counts it), the plain jobs through the `PgJobStore` alone. At the end of each
round the batch's row must count 1,000 successes and its `then` job must have been
released (pending).

Rounds alternate the two (and which goes first), so that a noisy neighbour hits both.

python -m bench.batch_cost
"""

import asyncio
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench import jobs as bench_jobs
from bench.common import machine, unique
from bench.jobrail_e2e import Stack, cleanup, create_database
from jobrail.jobs.domain import FlowRole, Job
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.jobs.flow import FlowId
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.retry import RetryPolicy
from jobrail.jobs.workflows import BatchCommand, FlowJob
from jobrail.kernel.clock import SystemClock
from jobrail.kernel.ids import TenantId
from jobrail.outbox.uow import SqlaUnitOfWork, UnitOfWorkFactory
from jobrail.runtime.bootstrap import Runtime, build_runtime
from jobrail.settings import DatabaseSettings
from jobrail.store.admin import drop_database
from jobrail.store.pg_job_store import PgJobStore
from jobrail.store.pg_pool import create_pool
from jobrail.store.tables import flows, jobs
from jobrail.worker.context import JobContext
from jobrail.worker.flow_recording import FlowRecordingStore
from jobrail.worker.job_store import JobStore
from jobrail.worker.runner import JobRun, JobRunner, RunnerConfig

COUNT = 1000
AT_ONCE = 64
ROUNDS = 3
TENANT = TenantId("bench")
TYPE = "bench.noop"


class NoMessages:
    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        return None

    async def publish(self, message: Outgoing) -> None:
        return None


async def noop(payload: Mapping[str, Any], ctx: JobContext) -> None:
    return None


def _runner(store: JobStore, flows: JobStore | None = None) -> JobRunner:
    nothing = NoMessages()
    return JobRunner(
        store,
        nothing,
        nothing,
        SystemClock(),
        RetryPolicy(base_s=1, cap_s=60),
        RunnerConfig("jobs.dlq", timedelta(seconds=10), timedelta(seconds=5)),
        flows=flows,
    )


async def _start_plain(runtime: Runtime, count: int) -> tuple[float, list[Job]]:
    """1,000 EnqueueJob calls, AT_ONCE at a time; seconds and the jobs."""
    numbers: asyncio.Queue[int] = asyncio.Queue()
    for n in range(count):
        numbers.put_nowait(n)
    made: list[Job] = []

    async def client() -> None:
        while not numbers.empty():
            n = numbers.get_nowait()
            async with runtime.container() as request:
                use_case = await request.get(EnqueueJob)
                result = await use_case(
                    EnqueueJobCommand(tenant_id=TENANT, type=TYPE, payload={"n": n})
                )
            made.append(result.job)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(AT_ONCE)))
    return time.perf_counter() - started, made


async def _start_batch(service: FlowService, count: int) -> tuple[float, list[Job], FlowId]:
    """One batch of `count` members and a `then`; seconds, the members and the flow."""
    command = BatchCommand(
        tenant_id=TENANT,
        jobs=[FlowJob(TYPE, {"n": n}) for n in range(count)],
        then=FlowJob(TYPE, {"n": -1}),
    )
    started = time.perf_counter()
    batch = await service.batch(command)
    return time.perf_counter() - started, batch.members, batch.flow.id


async def _drain(runner: JobRunner, made: list[Job]) -> float:
    run = JobRun(noop, timedelta(seconds=30))
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


async def _check(
    engine: AsyncEngine, made: dict[str, list[Job]], flow_id: FlowId, count: int
) -> None:
    """Every job ended succeeded, the batch counted each member once, and its `then` was
    released exactly once (blocked -> pending, one outbox row). Raises otherwise."""
    problems: list[str] = []
    async with engine.connect() as conn:
        for name, group in made.items():
            ids = [job.id for job in group]
            by_status: dict[str, int] = dict(
                (
                    await conn.execute(
                        select(jobs.c.status, func.count())
                        .where(jobs.c.id.in_(ids))
                        .group_by(jobs.c.status)
                    )
                ).all()
            )
            if by_status != {"succeeded": len(ids)}:
                problems.append(f"{name} jobs by status: {by_status}")
        row = (await conn.execute(select(flows).where(flows.c.id == flow_id))).mappings().one()
        counts = {k: row[k] for k in ("status", "total", "succeeded", "failed", "cancelled")}
        if counts != {
            "status": "succeeded",
            "total": count,
            "succeeded": count,
            "failed": 0,
            "cancelled": 0,
        }:
            problems.append(f"flow row: {counts}")
        then_id = row["callbacks"].get(FlowRole.THEN.value)
        then = (
            (await conn.execute(select(jobs.c.status).where(jobs.c.id == then_id))).scalar()
            if then_id
            else None
        )
        if then != "pending":
            problems.append(f"then callback {then_id}: {then}, not pending")
        released = await conn.scalar(
            text("SELECT count(*) FROM outbox WHERE position(convert_to(:id, 'UTF8') IN body) > 0"),
            {"id": str(then_id)},
        )
        if released != 1:
            problems.append(f"then callback {then_id}: {released} outbox rows, not 1")
    if problems:
        raise AssertionError("batch run went wrong: " + "; ".join(problems))


async def run(count: int = COUNT, rounds: int = ROUNDS) -> dict[str, Any]:
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    runtime = build_runtime(stack.settings(), worker=False, modules=bench_jobs.rail.modules)
    engine = create_async_engine(url)
    pool = await create_pool(DatabaseSettings(url=url))
    start_s: dict[str, list[float]] = {"plain": [], "batch": []}
    rates: dict[str, list[float]] = {"plain": [], "batch": []}
    try:
        await runtime.broker.startup()
        service = await runtime.container.get(FlowService)
        factory = await runtime.container.get(UnitOfWorkFactory)
        store = PgJobStore(pool, window_s=0.001)  # the worker's default batch window
        # As jobrail.runtime.container gives the runner: a member's end in one transaction.
        recording = FlowRecordingStore(store, lambda: factory(SqlaUnitOfWork), factory.workflows)
        runners = {"plain": _runner(store), "batch": _runner(store, flows=recording)}
        for n in range(rounds):
            async with engine.begin() as conn:
                await conn.execute(text("TRUNCATE jobs, outbox, flows CASCADE"))
            order = ("plain", "batch") if n % 2 == 0 else ("batch", "plain")
            made: dict[str, list[Job]] = {}
            flow_id: FlowId | None = None
            for name in order:
                if name == "plain":
                    seconds, made[name] = await _start_plain(runtime, count)
                else:
                    seconds, made[name], flow_id = await _start_batch(service, count)
                start_s[name].append(seconds)
            for name in order:
                rates[name].append(await _drain(runners[name], made[name]))
            assert flow_id is not None
            await _check(engine, made, flow_id, count)
            print(
                f"round {n + 1}: start ms/{count} plain {start_s['plain'][-1] * 1000:.0f}, "
                f"batch {start_s['batch'][-1] * 1000:.0f}; run jobs/s plain "
                f"{rates['plain'][-1]:.0f}, batch {rates['batch'][-1]:.0f}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await runtime.broker.shutdown()
        await runtime.container.close()
        await pool.close()
        await engine.dispose()
        await cleanup(stack)
        await drop_database(url)
    per_1000 = {name: statistics.median(s) * 1000 * 1000 / count for name, s in start_s.items()}
    rate = {name: statistics.median(r) for name, r in rates.items()}
    return {
        "start_ms_per_1000_jobs": {name: round(ms, 1) for name, ms in per_1000.items()},
        "ratio_start_batch_to_plain": round(per_1000["batch"] / per_1000["plain"], 2),
        "run_jobs_per_s": {name: round(r) for name, r in rate.items()},
        "ratio_run_batch_to_plain": round(rate["batch"] / rate["plain"], 2),
        "rounds": {
            "start_ms": {name: [round(s * 1000) for s in v] for name, v in start_s.items()},
            "run_jobs_per_s": {name: [round(r) for r in v] for name, v in rates.items()},
        },
        "jobs": count,
        "at_once": AT_ONCE,
        "machine": machine(),
    }


if __name__ == "__main__":
    print(asyncio.run(run()))
