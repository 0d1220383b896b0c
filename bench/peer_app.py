"""The API peers: a plain FastAPI app on Taskiq's taskiq-aio-pika, as a team would write it.

`POST /kiq` only awaits a task's `.kiq()`; `POST /insert-kiq` inserts a jobs row with
asyncpg and then awaits `.kiq()` (the seeds' enqueue: no outbox, no idempotency, no
auth, no rate limit). Served by plain `uvicorn bench.peer_app:app`, with uvicorn's
defaults (httptools and uvloop when installed, as they are in the bench extra).

Its task is a no-op; a worker (`taskiq worker bench.peer_app:broker`) started with
`BENCH_STARTS` set appends `<job id> <time.time()>` to that file as each task starts
(`bench.fair_dispatch` times request to start with it).
"""

import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from fastapi import FastAPI
from pydantic import BaseModel
from taskiq_aio_pika import AioPikaBroker, Exchange, Queue

QUEUE = os.environ.get("BENCH_QUEUE", "bench.peer")
DSN = os.environ.get("BENCH_PEER_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
STARTS = os.environ.get("BENCH_STARTS")

# The seeds' jobs table (checklist guide 03, "Job lifecycle and schema").
SCHEMA = """
CREATE TABLE IF NOT EXISTS seed_jobs (
    id UUID PRIMARY KEY,
    type TEXT NOT NULL,
    status TEXT NOT NULL,
    idempotency_key TEXT,
    payload_ref TEXT,
    result_ref TEXT,
    entity_id TEXT,
    attempts INT NOT NULL DEFAULT 0,
    max_attempts INT NOT NULL DEFAULT 5,
    last_error TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    started_at TIMESTAMPTZ,
    finished_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX IF NOT EXISTS seed_jobs_idempotency_uidx
    ON seed_jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS seed_jobs_status_created_idx ON seed_jobs (status, created_at);
CREATE INDEX IF NOT EXISTS seed_jobs_entity_idx ON seed_jobs (entity_id, created_at DESC);
"""

broker = AioPikaBroker(
    os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
    exchange=Exchange(name=f"{QUEUE}.exchange"),
    task_queues=[Queue(name=QUEUE)],
    dead_letter_queue=Queue(name=f"{QUEUE}.dlq"),
)


@broker.task(task_name="bench.peer_echo")
async def echo(job_id: str) -> None:
    if STARTS:
        fd = os.open(STARTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{job_id} {time.time()!r}\n".encode())
        finally:
            os.close(fd)


class EchoIn(BaseModel):
    message: str


pool: Any = None


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    global pool
    await broker.startup()
    pool = await asyncpg.create_pool(DSN)
    async with pool.acquire() as conn:
        await conn.execute(SCHEMA)
    yield
    await pool.close()
    await broker.shutdown()


app = FastAPI(lifespan=lifespan)


@app.post("/kiq", status_code=202)
async def kiq_only(body: EchoIn) -> dict[str, str]:
    job_id = str(uuid.uuid4())
    await echo.kiq(job_id)
    return {"job_id": job_id, "status": "pending"}


@app.post("/insert-kiq", status_code=202)
async def insert_then_kiq(body: EchoIn) -> dict[str, str]:
    job_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO seed_jobs (id, type, status, payload_ref, created_at, updated_at)"
        " VALUES ($1, $2, 'pending', $3, now(), now())",
        job_id,
        "bench.peer_echo",
        body.model_dump_json(),
    )
    await echo.kiq(str(job_id))
    return {"job_id": str(job_id), "status": "pending"}


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
