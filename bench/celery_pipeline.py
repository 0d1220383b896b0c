"""Run the seeds' Celery pipeline: pre-load jobs (row + message), one worker drains."""

import asyncio
import os
import time
import uuid
from typing import Any

from sqlalchemy import create_engine, text

from bench.common import (
    AMQP_URL,
    PG_SERVER,
    PYTHON,
    REDIS_URL,
    consumers,
    delete_queues,
    spawn,
    unique,
    wait_until,
)
from jobrail.store.admin import create_database_if_missing, drop_database

SCHEMA = """
CREATE TABLE seed_jobs (
    id uuid PRIMARY KEY, status text NOT NULL, entity_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz,
    finished_at timestamptz
)
"""


async def run(jobs: int = 3000, pools: tuple[str, ...] = ("prefork", "threads")) -> dict[str, int]:
    """Jobs/s of one Celery worker process (2 children, or 2 threads), per pool kind."""
    return {pool: await _run_pool(jobs, pool) for pool in pools}


async def _run_pool(jobs: int, pool: str) -> int:
    async_url = f"{PG_SERVER}/{unique('jobrail_bench_celery_')}"
    sync_url = async_url.replace("+asyncpg", "+psycopg")
    await create_database_if_missing(async_url)
    queue = unique("bench.celery.")
    env = {
        "BENCH_CELERY_DB": sync_url,
        "BENCH_QUEUE": queue,
        "BENCH_AMQP_URL": AMQP_URL,
        "BENCH_REDIS_URL": REDIS_URL,
    }
    os.environ.update(env)
    import bench.celery_app as app

    app.QUEUE = queue
    app.celery_app.conf.task_default_queue = queue
    db = create_engine(sync_url)
    with db.begin() as conn:
        conn.execute(text(SCHEMA))
        ids = [uuid.uuid4() for _ in range(jobs)]
        conn.execute(
            text("INSERT INTO seed_jobs (id, status, entity_id) VALUES (:id, 'pending', :e)"),
            [{"id": i, "e": f"e{n}"} for n, i in enumerate(ids)],
        )
    for n, job_id in enumerate(ids):
        app.seed_job.apply_async(args=[str(job_id), f"e{n}"], queue=queue)
    app.celery_app.close()
    worker = spawn(
        [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "bench.celery_app:celery_app",
            "worker",
            "-Q",
            queue,
            "--pool",
            pool,
            "-c",
            "2",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        env,
        f"celery-{pool}",
    )

    def finished() -> int:
        with db.connect() as conn:
            value: Any = conn.execute(
                text("SELECT count(*) FROM seed_jobs WHERE status = 'succeeded'")
            ).scalar()
        return int(value or 0)

    async def drained() -> bool:
        return await asyncio.to_thread(finished) == jobs

    try:
        await wait_until(lambda: consumers(queue), 60, "the celery worker")
        await wait_until(drained, 600, "celery to drain", interval=0.2)
        with db.connect() as conn:
            first, last = conn.execute(
                text("SELECT min(started_at), max(finished_at) FROM seed_jobs")
            ).one()
        return round(jobs / (last - first).total_seconds())
    finally:
        worker.stop()
        db.dispose()
        await delete_queues([queue])
        await drop_database(async_url)


if __name__ == "__main__":
    started = time.time()
    print(asyncio.run(run()), f"in {time.time() - started:.0f}s")
