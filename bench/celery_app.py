"""The seeds' Celery pipeline, written as the seeds write it (seed 001): a jobs row in
Postgres, a Redis token bucket and a SET NX lock released by Lua, status updates to
running and succeeded. Bench-only: Celery is not a jobrail dependency."""

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from redis import Redis
from sqlalchemy import create_engine, text

BROKER = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
DATABASE = os.environ.get("BENCH_CELERY_DB", "postgresql+psycopg://postgres@127.0.0.1:5432/x")
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("BENCH_QUEUE", "bench.celery")

celery_app = Celery("bench", broker=BROKER)
celery_app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

RELEASE_LUA = """
if redis.call("get", KEYS[1]) == ARGV[1] then
 return redis.call("del", KEYS[1])
else
 return 0
end
"""

BUCKET_LUA = """
local key = KEYS[1]
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local data = redis.call("hmget", key, "tokens", "ts")
local tokens = tonumber(data[1])
local ts = tonumber(data[2])
if tokens == nil then
 tokens = burst
 ts = now
end
local delta = math.max(0, now - ts)
tokens = math.min(burst, tokens + delta * rate)
local ok = 0
if tokens >= 1 then
 tokens = tokens - 1
 ok = 1
end
redis.call("hmset", key, "tokens", tokens, "ts", now)
redis.call("expire", key, 3600)
return ok
"""

_engine = None


def engine() -> Any:
    global _engine
    if _engine is None:
        _engine = create_engine(DATABASE, pool_size=5)
    return _engine


@contextmanager
def session_scope() -> Iterator[Any]:
    with engine().begin() as conn:
        yield conn


def get_redis(url: str) -> Redis:
    return Redis.from_url(url, decode_responses=True)


def take_token(r: Redis, key: str, rate_per_sec: float, burst: int) -> bool:
    return r.eval(BUCKET_LUA, 1, key, rate_per_sec, burst, time.time()) == 1  # type: ignore[no-any-return]


def acquire_lock(r: Redis, key: str, token: str, ttl_sec: int) -> bool:
    return bool(r.set(key, token, nx=True, ex=ttl_sec))


def release_lock(r: Redis, key: str, token: str) -> None:
    r.eval(RELEASE_LUA, 1, key, token)


@celery_app.task(bind=True, name="bench.seed_job", max_retries=25, acks_late=True)
def seed_job(self: Any, job_id: str, entity_id: str) -> None:
    r = get_redis(REDIS)
    if not take_token(r, f"{QUEUE}:rl:vendor", rate_per_sec=1e9, burst=10**9):
        raise self.retry(countdown=1)
    token = str(uuid.uuid4())
    lock_key = f"{QUEUE}:lock:{entity_id}"
    if not acquire_lock(r, lock_key, token, ttl_sec=120):
        raise self.retry(countdown=10)
    try:
        with session_scope() as db:
            status = db.execute(
                text("SELECT status FROM seed_jobs WHERE id = :id"), {"id": job_id}
            ).scalar()
            if status is None or status == "succeeded":
                return
            db.execute(
                text("UPDATE seed_jobs SET status = 'running', started_at = now() WHERE id = :id"),
                {"id": job_id},
            )
            # the side effect: nothing
            db.execute(
                text(
                    "UPDATE seed_jobs SET status = 'succeeded', finished_at = now() WHERE id = :id"
                ),
                {"id": job_id},
            )
    finally:
        release_lock(r, lock_key, token)
