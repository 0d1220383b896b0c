"""What a transaction-mode pooler costs the hot paths: with ``JOBRAIL_DATABASE__POOLER=
transaction`` asyncpg's statement caches are off, so each statement is prepared again
(an unnamed Parse/Describe round trip before its Bind/Execute), and PgBouncer adds a hop.

Three setups, in alternating rounds so that a noisy neighbour hits all of them:

- ``direct``: Postgres directly, caches on (``pooler=none``, the default);
- ``direct_no_cache``: Postgres directly with ``pooler=transaction`` (the caches' price
  alone);
- ``pgbouncer``: through PgBouncer in transaction mode (Debian's binary, started here on
  a free port, 8 server connections) with ``pooler=transaction``.

Measured: enqueues/s through EnqueueJob (the API's path: job row + outbox, publish),
64 at a time, and single-statement round trips/s on the hot paths' asyncpg pool (a
parameterised primary-key read of the jobs table, 32 at a time).

python -m bench.pgbouncer_cost
"""

import asyncio
import json
import statistics
import time
import uuid
from typing import Any

from sqlalchemy import make_url

from bench.common import machine, unique
from bench.jobrail_e2e import Stack, cleanup, create_database, enqueue
from jobrail.settings import DatabaseSettings
from jobrail.store.admin import drop_database
from jobrail.store.pg_pool import create_pool
from tests.support import pgbouncer

COUNT = 2000
READS = 10_000
ROUNDS = 3


async def reads(settings: DatabaseSettings, count: int = READS, concurrency: int = 32) -> float:
    pool = await create_pool(settings)
    done = 0

    async def client() -> None:
        nonlocal done
        while done < count:
            done += 1
            async with pool.acquire() as connection:
                await connection.fetchrow(
                    "SELECT id, status FROM jobs WHERE id = $1", uuid.UUID(int=done)
                )

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client() for _ in range(concurrency)))
    finally:
        await pool.close()
    return count / (time.perf_counter() - started)


async def run() -> dict[str, Any]:
    url = await create_database()
    bouncer = pgbouncer.start()
    name = make_url(url).database or ""
    setups = {
        "direct": (url, "none"),
        "direct_no_cache": (url, "transaction"),
        "pgbouncer": (bouncer.url(name), "transaction"),
    }
    enqueues: dict[str, list[float]] = {setup: [] for setup in setups}
    statements: dict[str, list[float]] = {setup: [] for setup in setups}
    try:
        for _ in range(ROUNDS):
            for setup, (database_url, pooler) in setups.items():
                database = DatabaseSettings(url=database_url, pooler=pooler)  # type: ignore[arg-type]
                stack = Stack(database_url=database_url, prefix=unique("bench."))
                try:
                    rate = await enqueue(
                        _Pooled(stack, pooler),  # type: ignore[arg-type]
                        COUNT,
                    )
                finally:
                    await cleanup(stack)
                enqueues[setup].append(rate)
                statements[setup].append(await reads(database))
    finally:
        pgbouncer.stop(bouncer)
        await drop_database(url)
    return {
        "machine": machine(),
        "enqueue_jobs_per_s": {k: round(statistics.median(v)) for k, v in enqueues.items()},
        "pool_statements_per_s": {k: round(statistics.median(v)) for k, v in statements.items()},
        "rounds": ROUNDS,
    }


class _Pooled:
    """A Stack whose settings name the pooler mode."""

    def __init__(self, stack: Stack, pooler: str) -> None:
        self._stack = stack
        self._pooler = pooler

    def settings(self, **overrides: Any) -> Any:
        database = {"url": self._stack.database_url, "pooler": self._pooler}
        return self._stack.settings(database=database, **overrides)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run()), indent=2))
