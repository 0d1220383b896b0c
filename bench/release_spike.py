"""Step 0 of fair dispatch (docs/design/fair-dispatch.md): can one dispatcher release
held jobs into RabbitMQ, in fair order across tenants, well faster than workers drain
them? If it can, releasing costs the pipeline little; if not, the design changes.

python -m bench.release_spike [--jobs N] [--window K]

A prototype, not jobrail's code: N held jobs in a table of their own (id, tenant,
rank), loaded across 10 and across 1,000 tenants, drained by release passes. A pass
picks the next `window` jobs in virtual-time order across the tenants that have work (a
heap; each tenant's next jobs buffered, the buffers of every tenant that ran dry refilled
in one statement), marks them released in one statement, publishes their messages with
publisher confirms, and commits. Beside it, the same messages published alone: the
broker's floor. A consumer acks everything, as workers would. Figures: released jobs/s,
SQL round trips per released job (BEGIN and COMMIT included), and this process's CPU
per released job; the best round's rate, the last round's costs.
"""

import argparse
import asyncio
import heapq
import json
import time
import uuid
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

import aio_pika
import asyncpg
import psutil

from bench.common import AMQP_URL, PG_SERVER, unique
from jobrail.store.admin import create_database_if_missing, drop_database

BODY = json.dumps(
    {
        "task_id": "00000000-0000-0000-0000-000000000000",
        "task_name": "bench.noop",
        "labels": {"queue_name": "jobs.default", "tenant_id": "t", "limit_keys": []},
        "labels_types": None,
        "args": [],
        "kwargs": {"job_id": "00000000-0000-0000-0000-000000000000"},
    }
).encode()
REFILL = 32  # a tenant's buffer is refilled this many jobs at a time


class Counted:
    """An asyncpg connection whose statements are counted."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn, self.statements = conn, 0

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        self.statements += 1
        return list(await self.conn.fetch(sql, *args))

    async def execute(self, sql: str, *args: Any) -> None:
        self.statements += 1
        await self.conn.execute(sql, *args)


async def _load(conn: asyncpg.Connection, jobs: int, tenants: int) -> None:
    await conn.execute("DROP TABLE IF EXISTS spike_held")
    await conn.execute(
        "CREATE TABLE spike_held (id uuid PRIMARY KEY, tenant text NOT NULL, "
        "rank_at timestamptz NOT NULL, released boolean NOT NULL DEFAULT false)"
    )
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        (uuid.uuid4(), f"t{n % tenants}", start + timedelta(milliseconds=n), False)
        for n in range(jobs)
    ]
    await conn.copy_records_to_table("spike_held", records=rows)
    await conn.execute(
        "CREATE INDEX spike_ready ON spike_held (tenant, rank_at) WHERE NOT released"
    )
    await conn.execute("ANALYZE spike_held")


class Dispatcher:
    """Virtual-time fair picks across tenants, equal weights (the prototype's model)."""

    def __init__(self, db: Counted) -> None:
        self.db = db
        self.heap: list[tuple[float, str]] = []
        self.buffers: dict[str, deque[uuid.UUID]] = {}
        self.dry: set[str] = set()  # buffers to refill, of tenants that may have more
        self.exhausted: set[str] = set()

    async def start(self) -> None:
        rows = await self.db.fetch("SELECT DISTINCT tenant FROM spike_held")
        tenants = [row["tenant"] for row in rows]
        await self._refill(tenants, [])
        self.heap = [(0.0, tenant) for tenant in tenants if self.buffers[tenant]]
        heapq.heapify(self.heap)

    async def _refill(self, tenants: list[str], picked: list[uuid.UUID]) -> None:
        """The next jobs of every tenant in `tenants`, in one statement (`picked`: this
        pass's, not marked released yet)."""
        rows = await self.db.fetch(
            "SELECT t.tenant, h.id FROM unnest($1::text[]) AS t(tenant) CROSS JOIN LATERAL "
            "(SELECT id FROM spike_held WHERE tenant = t.tenant AND NOT released "
            "AND id <> ALL($3::uuid[]) ORDER BY rank_at LIMIT $2) AS h",
            tenants,
            REFILL,
            picked,
        )
        got = dict.fromkeys(tenants, 0)
        for row in rows:
            self.buffers.setdefault(row["tenant"], deque()).append(row["id"])
            got[row["tenant"]] += 1
        for tenant, count in got.items():
            self.buffers.setdefault(tenant, deque())
            if count < REFILL:
                self.exhausted.add(tenant)
        self.dry.difference_update(tenants)

    async def pick(self, window: int) -> list[uuid.UUID]:
        picked: list[uuid.UUID] = []
        while len(picked) < window and self.heap:
            vtime, tenant = self.heap[0]
            buffer = self.buffers[tenant]
            if not buffer:
                if tenant in self.exhausted:
                    heapq.heappop(self.heap)  # no work left: it takes no share
                else:
                    await self._refill(sorted(self.dry), picked)
                continue
            heapq.heapreplace(self.heap, (vtime + 1.0, tenant))
            picked.append(buffer.popleft())
            if not buffer and tenant not in self.exhausted:
                self.dry.add(tenant)
        return picked


async def _release(
    db: Counted, channel: aio_pika.abc.AbstractChannel, queue: str, jobs: int, window: int
) -> dict[str, float]:
    dispatcher = Dispatcher(db)
    await dispatcher.start()
    released = 0
    cpu = psutil.Process()
    cpu_before = sum(cpu.cpu_times()[:2])
    started = time.perf_counter()
    while released < jobs:
        picked = await dispatcher.pick(window)
        if not picked:
            break
        db.statements += 2  # the pass's BEGIN and COMMIT
        async with db.conn.transaction():
            await db.execute("UPDATE spike_held SET released = true WHERE id = ANY($1)", picked)
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=queue,
                    )
                    for _ in picked
                )
            )
        released += len(picked)
    elapsed = time.perf_counter() - started
    return {
        "released": released,
        "jobs_per_s": round(released / elapsed),
        "statements_per_job": round(db.statements / released, 4),
        "cpu_ms_per_job": round(1000 * (sum(cpu.cpu_times()[:2]) - cpu_before) / released, 4),
    }


async def _publish_only(
    channel: aio_pika.abc.AbstractChannel, queue: str, jobs: int, window: int
) -> dict[str, float]:
    cpu = psutil.Process()
    cpu_before = sum(cpu.cpu_times()[:2])
    started = time.perf_counter()
    for first in range(0, jobs, window):
        await asyncio.gather(
            *(
                channel.default_exchange.publish(
                    aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=queue,
                )
                for _ in range(min(window, jobs - first))
            )
        )
    elapsed = time.perf_counter() - started
    return {
        "jobs_per_s": round(jobs / elapsed),
        "cpu_ms_per_job": round(1000 * (sum(cpu.cpu_times()[:2]) - cpu_before) / jobs, 4),
    }


async def run(jobs: int = 20_000, window: int = 64, rounds: int = 2) -> dict[str, Any]:
    url = f"{PG_SERVER}/{unique('jobrail_spike_')}"
    await create_database_if_missing(url)
    queue = unique("bench.spike.")
    producer = await aio_pika.connect(AMQP_URL)
    consumer = await aio_pika.connect(AMQP_URL)
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    figures: dict[str, list[dict[str, float]]] = {"publish_only": []}
    try:
        channel = await producer.channel(publisher_confirms=True)
        declared = await channel.declare_queue(
            queue, durable=True, arguments={"x-queue-type": "quorum"}
        )
        acking = await consumer.channel()
        await acking.set_qos(prefetch_count=256)

        async def ack(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await message.ack()

        await (await acking.get_queue(queue)).consume(ack)
        for _ in range(rounds):
            for tenants in (10, 1000):
                await _load(conn, jobs, tenants)
                figures.setdefault(f"release_{tenants}_tenants", []).append(
                    await _release(Counted(conn), channel, queue, jobs, window)
                )
            figures["publish_only"].append(await _publish_only(channel, queue, jobs, window))
        await declared.delete(if_unused=False, if_empty=False)
    finally:
        await conn.close()
        await producer.close()
        await consumer.close()
        await drop_database(url)
    result: dict[str, Any] = {"jobs": jobs, "window": window, "rounds": figures}
    for name, measured in figures.items():
        result[name] = {
            k: max(m[k] for m in measured) if k == "jobs_per_s" else measured[-1][k]
            for k in measured[0]
        }
    floor = result["publish_only"]["jobs_per_s"]
    result["release_vs_publish_only"] = {
        name: round(result[name]["jobs_per_s"] / floor, 3)
        for name in ("release_10_tenants", "release_1000_tenants")
    }
    result["cost_1000_vs_10_tenants_cpu"] = round(
        result["release_1000_tenants"]["cpu_ms_per_job"]
        / result["release_10_tenants"]["cpu_ms_per_job"],
        3,
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.jobs, args.window, args.rounds)), indent=2))
