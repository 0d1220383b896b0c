"""Nothing is lost when a message is bad, a process dies or a service goes away."""

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import JobId
from jobrail.messaging.envelope import job_envelope
from jobrail.persistence.tables import outbox
from jobrail.settings import Settings
from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.services import start_postgres, stop_postgres, wait_for


async def test_malformed_and_unknown_messages_go_to_the_dlq_and_consuming_goes_on(
    api: ApiClient, workers: Callable[..., Any], rabbit: RabbitProbe
) -> None:
    await workers()
    queue = rabbit.topology.queues["jobs.default"]
    await rabbit.publish_raw(queue, b"\x80\x04not json at all")
    await rabbit.publish_raw(
        queue,
        json.dumps(
            {
                "task_id": "t1",
                "task_name": "no.such_task",
                "labels": {},
                "args": [],
                "kwargs": {"job_id": str(uuid.uuid4())},
            }
        ).encode(),
    )

    job_id = await api.echo(message="still here")
    await api.wait_status(job_id, "succeeded")

    dead: list[Any] = []

    async def both() -> bool:
        dead.extend(await rabbit.drain(rabbit.topology.dead_letter_queue))
        return len(dead) >= 2

    await wait_for(both, what="two dead letters")
    reasons = sorted(str(d.headers["x-jobrail-reason"]) for d in dead)
    assert reasons[0].startswith("malformed message: body is not JSON")
    assert reasons[1] == "unknown task 'no.such_task'"
    assert (
        dead[0].body in {b"\x80\x04not json at all"} or dead[1].body == b"\x80\x04not json at all"
    )
    assert {d.headers["x-jobrail-source-queue"] for d in dead} == {"jobs.default"}


async def test_a_message_redelivered_after_success_does_not_run_again(
    api: ApiClient, workers: Callable[..., Any], rabbit: RabbitProbe
) -> None:
    worker = await workers()
    job_id = await api.echo()
    done = await api.wait_status(job_id, "succeeded")

    again = job_envelope(
        job_id=JobId(uuid.UUID(job_id)),
        job_type="demo.echo",
        queue="jobs.default",
        tenant_id="default",
    )
    await rabbit.publish_raw(rabbit.topology.queues["jobs.default"], again.body)

    def acknowledged_without_running() -> bool:
        return any(
            "already succeeded" in r.get("msg", "") and job_id in r["msg"]
            for r in worker.log_records()
        )

    await wait_for(_async(acknowledged_without_running), what="the duplicate to be acknowledged")
    after = await api.job(job_id)
    assert after["attempts"] == 1
    assert after["finished_at"] == done["finished_at"]
    assert await rabbit.depth(rabbit.topology.queues["jobs.default"]) == (0, 1)


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


@pytest.fixture
def postgres_restarted() -> Iterator[None]:
    """Whatever the test does to Postgres, it is running again afterwards."""
    try:
        yield
    finally:
        start_postgres()


async def test_with_the_database_stopped_ready_is_503_and_health_stays_200(
    api: ApiClient, postgres_restarted: None
) -> None:
    assert (await api.get("/ready")).status_code == 200

    await asyncio.to_thread(stop_postgres)
    ready = await api.get("/ready")
    health = await api.get("/health")
    enqueue = await api.post("/demo/echo", json={"message": "x"})

    assert ready.status_code == 503
    assert ready.json()["checks"]["database"].startswith("unavailable")
    assert health.status_code == 200
    assert enqueue.status_code == 503
    assert enqueue.headers["Retry-After"] == "5"
    assert enqueue.json()["error"]["code"] == "database_unavailable"

    await asyncio.to_thread(start_postgres)

    async def ready_again() -> bool:
        return (await api.get("/ready")).status_code == 200

    await wait_for(ready_again, timeout=20, what="/ready to recover")


def _async(check: Callable[[], bool]) -> Callable[[], Any]:
    async def predicate() -> bool:
        return check()

    return predicate
