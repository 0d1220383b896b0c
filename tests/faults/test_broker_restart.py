"""Restart RabbitMQ during a stream of enqueues: the API keeps answering 202 through the
outbox, and every job runs once RabbitMQ is back."""

import asyncio
import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs, outbox
from tests.faults.conftest import in_thread, job_counts, rabbitmqctl, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.services import wait_for

REQUESTS, EVERY_S = 150, 0.05
DOWN_AFTER, DOWN_FOR = 40, 4.0  # requests before the stop; seconds RabbitMQ stays down


async def test_a_rabbitmq_restart_mid_stream_loses_no_enqueue_and_runs_every_job(
    api: ApiClient,
    workers: Any,
    engine: AsyncEngine,
    rabbitmq_restored: None,
    report: Any,
) -> None:
    for n in range(2):
        await workers(f"w{n}")
    statuses: list[int] = []
    latencies: list[float] = []
    ready_while_down: list[int] = []
    outage: dict[str, float] = {}

    async def stream() -> None:
        for n in range(REQUESTS):
            started = time.monotonic()
            response = await api.post("/demo/echo", json={"message": f"m-{n}"})
            latencies.append(time.monotonic() - started)
            statuses.append(response.status_code)
            await asyncio.sleep(EVERY_S)

    async def restart() -> None:
        while len(statuses) < DOWN_AFTER:
            await asyncio.sleep(0.01)
        outage["stopped"] = time.monotonic()
        await in_thread(rabbitmqctl, "stop_app")
        await asyncio.sleep(DOWN_FOR / 2)
        ready_while_down.append((await api.get("/ready")).status_code)
        await asyncio.sleep(DOWN_FOR / 2)
        outage["started"] = time.monotonic()  # recovery is timed from the start command
        await in_thread(rabbitmqctl, "start_app")

    await asyncio.gather(stream(), restart())
    async with engine.connect() as conn:
        held = await conn.scalar(
            select(func.count()).select_from(outbox).where(outbox.c.published_at.is_(None))
        )

    async def api_reconnected() -> bool:
        return (await api.get("/ready")).status_code == 200

    await wait_for(api_reconnected, timeout=30, interval=0.2, what="the API to reconnect")
    done_at = await wait_all_terminal(engine, REQUESTS, timeout=90)

    counts = await job_counts(engine)
    async with engine.connect() as conn:
        attempts = (
            await conn.execute(select(jobs.c.attempts, func.count()).group_by(jobs.c.attempts))
        ).all()
    # A published row's mark may wait a moment (JOBRAIL_OUTBOX's mark delay, at most
    # 0.25 s) for an enqueue statement to carry it, so the last jobs can finish before
    # their rows are marked: every row must be marked soon after, none left to the relay.
    unpublished = await _unpublished_after(engine, settle_s=5.0)
    assert statuses == [202] * REQUESTS
    assert ready_while_down == [503]
    assert counts == {"succeeded": REQUESTS}
    assert dict(attempts) == {1: REQUESTS}  # each job ran once
    assert unpublished == 0
    report(
        scenario="rabbitmq restart during 150 enqueues",
        jobs=REQUESTS,
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=0,
        recover_s=round(done_at - outage["started"], 1),
        notes=f"down {round(outage['started'] - outage['stopped'], 1)}s, "
        f"{held} enqueues waited in the outbox, slowest 202 {round(max(latencies), 2)}s",
    )


async def _unpublished_after(engine: AsyncEngine, settle_s: float) -> int:
    """The outbox rows still unmarked once they are all marked, or `settle_s` has passed."""
    deadline = time.monotonic() + settle_s
    while True:
        async with engine.connect() as conn:
            unpublished = await conn.scalar(
                select(func.count()).select_from(outbox).where(outbox.c.published_at.is_(None))
            )
        if unpublished == 0 or time.monotonic() >= deadline:
            return int(unpublished or 0)
        await asyncio.sleep(0.05)
