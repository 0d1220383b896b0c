"""Per job, counted at the wire (not timed): Redis commands, SQL statements and round
trips, RabbitMQ publishes, on the enqueue side and on the worker side."""

import asyncio
from collections.abc import Awaitable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine

from bench import jobs as bench_jobs
from bench.common import PYTHON, consumers, pss_mb, spawn, unique, wait_until
from bench.jobrail_e2e import Stack, cleanup, create_database
from bench.wire import AmqpCounter, CountingProxy, PostgresCounter, RedisCounter
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.runtime.bootstrap import build_runtime
from jobrail.store.admin import drop_database
from jobrail.store.tables import jobs
from jobrail.transport.topology import Topology

WARM_UP = 8
WARM_UP_ONE_BY_ONE = 100
QUIET = {  # no periodic work while counting: only what the jobs cost
    "JOBRAIL_OUTBOX__RELAY_INTERVAL_S": "600",
    "JOBRAIL_EVENTS__POLL_INTERVAL_MS": "600000",  # the webhook relay's look at the feed
}


def _through(url: str, port: int, default_port: int) -> str:
    return url.replace(f"127.0.0.1:{default_port}", f"127.0.0.1:{port}")


async def run(count: int = 300) -> dict[str, Any]:
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    enqueue_pg = await CountingProxy(5432, PostgresCounter()).start()
    enqueue_amqp = await CountingProxy(5672, AmqpCounter()).start()
    worker_pg = await CountingProxy(5432, PostgresCounter()).start()
    worker_amqp = await CountingProxy(5672, AmqpCounter()).start()
    # Both sides' Redis through one proxy: only what this run's processes send counts.
    redis = await CountingProxy(6379, RedisCounter()).start()
    topology = Topology.from_settings(stack.settings().rabbit)
    worker = spawn(
        [PYTHON, "-m", "jobrail.cli", "worker"],
        stack.env(
            JOBRAIL_DATABASE__URL=_through(url, worker_pg.port, 5432),
            JOBRAIL_RABBIT__URL=_through(stack.amqp_url, worker_amqp.port, 5672),
            JOBRAIL_REDIS__URL=_through(stack.redis_url, redis.port, 6379),
            **QUIET,
        ),
        "counts-worker",
    )
    engine = create_async_engine(url)
    try:
        await wait_until(lambda: consumers(topology.queues["jobs.default"]), 60, "the worker")
        await asyncio.sleep(1)
        idle_pss = pss_mb(worker.popen.pid)
        runtime = build_runtime(
            stack.settings(
                database={"url": _through(url, enqueue_pg.port, 5432)},
                rabbit={
                    "url": _through(stack.amqp_url, enqueue_amqp.port, 5672),
                    "prefix": stack.prefix,
                },
                redis={
                    "url": _through(stack.redis_url, redis.port, 6379),
                    "key_prefix": f"{stack.prefix}jobrail:",
                },
            ),
            worker=False,
            modules=bench_jobs.rail.modules,
        )
        await runtime.broker.startup()

        async def enqueue_one(n: int) -> None:
            async with runtime.container() as request:
                enqueue = await request.get(EnqueueJob)
                await enqueue(
                    EnqueueJobCommand(
                        tenant_id=TenantId("bench"), type="bench.noop", payload={"n": n}
                    )
                )

        async def finished() -> int:
            async with engine.connect() as conn:
                return int(
                    await conn.scalar(
                        select(func.count()).select_from(jobs).where(jobs.c.status == "succeeded")
                    )
                )

        # Steady state: a few jobs first, uncounted (some at once, as the pools grow when
        # a mark goes out beside an enqueue), so that the connections both sides open and
        # what each new connection asks once (types, settings, prepared statements) are
        # not counted against the jobs measured.
        await asyncio.gather(*(enqueue_one(-n) for n in range(1, WARM_UP + 1)))
        # Then as the counted jobs go, one at a time, so that the worker's pools have
        # grown to what that takes (a new connection's type and settings queries are
        # a dozen statements, not a cost of the jobs).
        await wait_until(
            lambda: _equals(finished(), WARM_UP), 60, "the warm-up jobs", interval=0.05
        )

        async def one_job(n: int, before: int) -> None:
            """Enqueue a job and wait until it has run: no job shares a call with
            another, on either side (the enqueue does not wait for its publish, so
            enqueues back to back would reach the worker together and be batched)."""
            await enqueue_one(n)
            await wait_until(lambda: _equals(finished(), before + 1), 30, "the job", interval=0.002)

        for n in range(WARM_UP + 1, WARM_UP + WARM_UP_ONE_BY_ONE + 1):
            await one_job(-n, n - 1)
        warm_up = WARM_UP + WARM_UP_ONE_BY_ONE
        await asyncio.sleep(0.3)  # the warm-up's marks and acks go out before counting
        for counter in (enqueue_pg, enqueue_amqp, worker_pg, worker_amqp, redis):
            counter.counter.counts.clear()
        for n in range(count):  # one at a time: the cost of one job, not of a batch
            await one_job(n, warm_up + n)
        await asyncio.sleep(0.5)
        await runtime.broker.shutdown()
        await runtime.container.close()
        per = lambda value: round(value / count, 2)  # noqa: E731
        return {
            "redis_round_trips": per(redis.counter.counts["scripts"]),
            "worker_sql_statements": per(worker_pg.counter.counts["statements"]),
            "worker_sql_round_trips": per(worker_pg.counter.counts["round_trips"]),
            "enqueue_sql_statements": per(enqueue_pg.counter.counts["statements"]),
            "enqueue_sql_round_trips": per(enqueue_pg.counter.counts["round_trips"]),
            # Once per new connection, not per job (bench/wire.py): as counted, in all.
            "connection_setup_statements": worker_pg.counter.counts["connection_setup"]
            + enqueue_pg.counter.counts["connection_setup"],
            "enqueue_rabbitmq_publishes": per(enqueue_amqp.counter.counts["publishes"]),
            "worker_rabbitmq_publishes": per(worker_amqp.counter.counts["publishes"]),
            "worker_rabbitmq_acks": per(worker_amqp.counter.counts["acks"]),
            "pss_mb_idle": idle_pss,
        }
    finally:
        worker.stop()
        await engine.dispose()
        for proxy in (enqueue_pg, enqueue_amqp, worker_pg, worker_amqp, redis):
            await proxy.stop()
        await cleanup(stack)
        await drop_database(url)


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


if __name__ == "__main__":
    print(asyncio.run(run()))
