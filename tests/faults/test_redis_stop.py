"""Stop Redis during a run: jobs with limits wait (never run unprotected), enqueue answers
503, jobs without limits go on, and everything finishes once Redis is back."""

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs
from tests.faults.conftest import in_thread, job_counts, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.recorder import Recorder
from tests.support.services import start_redis, stop_redis

LIMITED, UNLIMITED, DOWN_FOR = 60, 60, 5.0


@pytest.fixture
def redis_restored() -> Iterator[None]:
    try:
        yield
    finally:
        start_redis()


async def test_with_redis_stopped_limited_jobs_wait_and_everything_recovers(
    api: ApiClient,
    workers: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    redis_restored: None,
    report: Any,
) -> None:
    for n in range(2):
        await workers(f"w{n}")
    limited = [
        await api.enqueue(
            "test.exclusive", {"url": recorder.url, "resource": f"r{n}", "n": n, "hold_ms": 100}
        )
        for n in range(LIMITED)
    ]
    await asyncio.sleep(0.3)  # some limited jobs are admitted and running
    stopped = datetime.now(UTC)
    await in_thread(stop_redis)
    unlimited = [
        await api.enqueue("test.effect", {"url": recorder.url, "sleep_ms": 20})
        for _ in range(UNLIMITED)
    ]
    enqueue_while_down = await api.post("/demo/echo", json={"message": "m"})
    await asyncio.sleep(DOWN_FOR)
    async with engine.connect() as conn:
        states = dict(
            (await conn.execute(select(jobs.c.id, jobs.c.status))).all()  # type: ignore[arg-type]
        )
    restarted_mono = time.monotonic()  # recovery is timed from the start command
    await in_thread(start_redis)
    restarted = datetime.now(UTC)

    done_at = await wait_all_terminal(engine, LIMITED + UNLIMITED, timeout=90)

    async with engine.connect() as conn:
        started = dict(
            (
                await conn.execute(
                    select(jobs.c.id, jobs.c.started_at).where(jobs.c.type == "test.exclusive")
                )
            ).all()  # type: ignore[arg-type]
        )
    counts = await job_counts(engine)
    ran_unprotected = [
        job_id
        for job_id, at in started.items()
        # Admitted before the stop (plus the time the stop takes to be seen) is fine.
        if stopped.timestamp() + 1.0 < at.timestamp() < restarted.timestamp()
    ]
    effects = recorder.effects()
    exclusive_starts = [c for c in recorder.calls if c.params.get("phase") == "start"]
    assert enqueue_while_down.status_code == 503
    assert enqueue_while_down.json()["error"]["code"] == "service_unavailable"
    # Jobs without limits kept running while Redis was away; limited ones waited.
    assert all(states[uuid_of(job_id)] == "succeeded" for job_id in unlimited)
    assert ran_unprotected == []
    assert counts == {"succeeded": LIMITED + UNLIMITED}
    assert len(effects) == UNLIMITED
    assert sorted(int(c.params["n"]) for c in exclusive_starts) == list(range(LIMITED))
    assert len(limited) == LIMITED
    report(
        scenario="redis stopped mid-run",
        jobs=LIMITED + UNLIMITED,
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=sum(effects.values()) - len(effects),
        recover_s=round(done_at - restarted_mono, 1),
        notes=f"down {DOWN_FOR}s; limited jobs waiting when it came back="
        f"{sum(1 for j in limited if states[uuid_of(j)] != 'succeeded')}, enqueue 503",
    )


def uuid_of(job_id: str) -> uuid.UUID:
    return uuid.UUID(job_id)
