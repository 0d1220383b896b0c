"""Quick checks of crash and outage handling; the fault-injection suite
(tests/faults, `make test-faults`) runs the heavy scenarios."""

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.settings import Settings
from jobrail.store.tables import outbox
from tests.support.fixtures import ApiClient, settings_from


async def test_with_rabbitmq_unreachable_enqueue_still_answers_202_and_the_relay_delivers(
    stack_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[[Settings], Any],
    workers: Callable[..., Any],
    engine: AsyncEngine,
) -> None:
    unreachable = {**stack_env, "JOBRAIL_RABBIT__URL": "amqp://guest:guest@127.0.0.1:1/"}
    async with make_api(settings_from(unreachable, monkeypatch)) as api:
        ready = await api.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["checks"]["broker"] == "not connected"

        job_id = await api.echo(message="via the outbox")
        async with engine.connect() as conn:
            published_at = await conn.scalar(select(outbox.c.published_at))
        assert published_at is None

        await workers()  # its relay can reach RabbitMQ
        job = await api.wait_status(job_id, "succeeded", timeout=20)

    assert job["result"] == {"echo": "via the outbox"}
    async with engine.connect() as conn:
        assert await conn.scalar(select(outbox.c.published_at)) is not None


async def test_a_worker_killed_mid_job_leaves_it_to_be_redelivered_and_finished(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    short = {"JOBRAIL_JOBS__TIMEOUTS_S": '{"demo.echo": 4}'}
    first = await workers("doomed", **short)
    job_id = await api.echo(sleep_ms=2500, message="survivor")
    await api.wait_status(job_id, "running")

    first.kill()
    await workers("rescuer", **short)
    job = await api.wait_status(job_id, "succeeded", timeout=30)

    assert job["result"] == {"echo": "survivor"}
    assert job["attempts"] == 2


async def test_a_long_job_of_a_killed_worker_is_taken_over_after_its_lease_not_its_timeout(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    long = {"JOBRAIL_JOBS__TIMEOUTS_S": '{"demo.echo": 600}', "JOBRAIL_JOBS__LEASE_S": "2"}
    first = await workers("doomed", **long)
    job_id = await api.echo(sleep_ms=1500, message="survivor")
    await api.wait_status(job_id, "running")

    first.kill()
    killed_at = time.monotonic()
    await workers("rescuer", **long)
    job = await api.wait_status(job_id, "succeeded", timeout=30)
    taken_over_after = time.monotonic() - killed_at

    assert job["result"] == {"echo": "survivor"}
    assert job["attempts"] == 2
    # Its claim lasted 2 s at a time, renewed while it ran: the rescuer had it within
    # about that (plus its own start and the 1.5 s run), not after 600 s + grace.
    assert taken_over_after < 20


async def test_graceful_shutdown_lets_the_running_job_finish(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    worker = await workers()
    job_id = await api.echo(sleep_ms=1500)
    await api.wait_status(job_id, "running")

    code = await asyncio.to_thread(worker.terminate, 30)

    job = await api.job(job_id)
    assert job["status"] == "succeeded"
    assert code == 0
