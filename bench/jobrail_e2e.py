"""jobrail end to end: EnqueueJob (job row + outbox) -> RabbitMQ -> worker processes
with a limit and a lock -> claim -> no-op handler -> succeeded."""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from bench import jobs as bench_jobs
from bench.common import (
    AMQP_URL,
    PG_SERVER,
    PYTHON,
    REDIS_URL,
    Proc,
    consumers,
    delete_queues,
    pss_mb,
    spawn,
    tree_cpu_s,
    unique,
    wait_until,
)
from jobrail.cli.schema import migrate
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.runtime.bootstrap import build_runtime
from jobrail.settings import Settings
from jobrail.store.admin import create_database_if_missing, drop_database
from jobrail.store.tables import jobs
from jobrail.transport.topology import Topology

APP = "bench.jobs:rail"  # bench.noop, beside the demo module (JOBRAIL_MODULES below)
WORKER_ENV: dict[str, str] = {}


@dataclass
class Stack:
    database_url: str
    amqp_url: str = AMQP_URL
    redis_url: str = REDIS_URL
    prefix: str = ""

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "JOBRAIL_MODE": "stack",
            "JOBRAIL_ENVIRONMENT": "production",
            "JOBRAIL_LOG_LEVEL": "WARNING",
            "JOBRAIL_APP": APP,
            # Production loads the demo module (POST /demo/echo) only when named.
            "JOBRAIL_MODULES": "demo",
            "JOBRAIL_DATABASE__URL": self.database_url,
            "JOBRAIL_RABBIT__URL": self.amqp_url,
            "JOBRAIL_RABBIT__PREFIX": self.prefix,
            "JOBRAIL_REDIS__URL": self.redis_url,
            "JOBRAIL_REDIS__KEY_PREFIX": f"{self.prefix}jobrail:",
            **extra,
        }

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "mode": "stack",
            "database": {"url": self.database_url},
            "rabbit": {"url": self.amqp_url, "prefix": self.prefix},
            "redis": {"url": self.redis_url, "key_prefix": f"{self.prefix}jobrail:"},
        }
        values.update(overrides)
        return Settings(**values)


async def create_database() -> str:
    url = f"{PG_SERVER}/{unique('jobrail_bench_')}"
    await create_database_if_missing(url)
    await asyncio.to_thread(migrate, Settings(database={"url": url}))  # type: ignore[arg-type]
    return url


async def enqueue(stack: Stack, count: int, concurrency: int = 64) -> float:
    """Enqueue `count` bench jobs through EnqueueJob; return jobs/s."""
    runtime = build_runtime(stack.settings(), worker=False, modules=bench_jobs.rail.modules)
    await runtime.broker.startup()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(count):
        queue.put_nowait(n)

    async def client() -> None:
        while not queue.empty():
            n = queue.get_nowait()
            async with runtime.container() as request:
                use_case = await request.get(EnqueueJob)
                await use_case(
                    EnqueueJobCommand(
                        tenant_id=TenantId("bench"), type="bench.noop", payload={"n": n}
                    )
                )

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client() for _ in range(concurrency)))
    finally:
        await runtime.broker.shutdown()
        await runtime.container.close()
    return count / (time.perf_counter() - started)


async def drain(stack: Stack, count: int, processes: int) -> dict[str, float]:
    """Start `processes` worker processes on a pre-loaded queue; time them from the
    first claim to the last finish (from the jobs table)."""
    engine = create_async_engine(stack.database_url)
    topology = Topology.from_settings(stack.settings().rabbit)
    worker: Proc = spawn(
        [PYTHON, "-m", "jobrail.cli", "worker"],
        stack.env(JOBRAIL_WORKER__PROCESSES=str(processes), **WORKER_ENV),
        f"jobrail-{processes}",
    )
    try:
        await wait_until(
            lambda: _at_least(consumers(topology.queues["jobs.default"]), processes),
            60,
            "workers",
        )

        async def done() -> bool:
            async with engine.connect() as conn:
                finished = await conn.scalar(
                    select(func.count()).select_from(jobs).where(jobs.c.status == "succeeded")
                )
            return finished == count

        peak = 0.0

        async def watch_memory() -> None:
            nonlocal peak
            while True:
                peak = max(peak, pss_mb(worker.popen.pid))
                await asyncio.sleep(0.25)

        watcher = asyncio.create_task(watch_memory())
        # The workers' CPU from their consumers' start (the first jobs are under way)
        # to the last job: steadier than jobs/s on a machine other work shares.
        cpu_before = tree_cpu_s(worker.popen.pid)
        await wait_until(done, 600, "all jobs to succeed", interval=0.2)
        cpu = tree_cpu_s(worker.popen.pid) - cpu_before
        watcher.cancel()
        async with engine.connect() as conn:
            first, last = (
                await conn.execute(
                    select(func.min(jobs.c.started_at), func.max(jobs.c.finished_at))
                )
            ).one()
        return {
            "jobs_per_s": count / (last - first).total_seconds(),
            "pss_mb_loaded": peak,
            "cpu_ms_per_job": round(1000 * cpu / count, 3),
        }
    finally:
        worker.stop()
        await engine.dispose()


async def _at_least(value: Any, minimum: int) -> bool:
    return (await value) >= minimum


async def reset(stack: Stack) -> None:
    engine = create_async_engine(stack.database_url)
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE jobs, outbox, inbox CASCADE"))
    await engine.dispose()


async def cleanup(stack: Stack) -> None:
    topology = Topology.from_settings(stack.settings().rabbit)
    await delete_queues(
        [*topology.queues.values(), topology.dead_letter_queue, *topology.delay_queues.values()],
        [topology.exchange, topology.delay_exchange],
    )
    # The run's limit keys: every bench job has a lock of its own, whose fencing counter
    # Redis would otherwise keep for its whole TTL (days), a key per job of every run.
    redis = Redis.from_url(stack.redis_url)
    try:
        keys = [key async for key in redis.scan_iter(match=f"{stack.prefix}jobrail:*", count=1000)]
        for first in range(0, len(keys), 1000):
            await redis.delete(*keys[first : first + 1000])
    finally:
        await redis.aclose()


async def run(count: int = 5000, processes: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    url = await create_database()
    results: dict[str, Any] = {"jobs_per_s": {}, "pss_mb_loaded": {}, "cpu_ms_per_job": {}}
    try:
        for n in processes:
            stack = Stack(database_url=url, prefix=unique("bench."))
            await reset(stack)
            results.setdefault("enqueue_jobs_per_s", await enqueue(stack, count))
            measured = await drain(stack, count, n)
            results["jobs_per_s"][str(n)] = round(measured["jobs_per_s"])
            results["pss_mb_loaded"][str(n)] = measured["pss_mb_loaded"]
            results["cpu_ms_per_job"][str(n)] = measured["cpu_ms_per_job"]
            await cleanup(stack)
    finally:
        await drop_database(url)
    return results


if __name__ == "__main__":
    print(asyncio.run(run(processes=(1,))))
