"""The central promise, end to end: 202 and a job id, a worker process runs it, status in the DB."""

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import DUE_TOLERANCE
from jobrail.store.tables import jobs, outbox
from tests.support.fixtures import ApiClient
from tests.support.rabbit import RabbitProbe


async def test_an_enqueued_job_runs_in_a_worker_process_and_succeeds(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    await workers()

    job_id = await api.echo(message="over the wire")
    job = await api.wait_status(job_id, "succeeded")

    assert job["result"] == {"echo": "over the wire"}
    assert job["attempts"] == 1
    assert job["started_at"] is not None
    assert job["finished_at"] is not None


async def test_one_idempotency_key_twice_makes_one_job_and_one_message(
    api: ApiClient, workers: Callable[..., Any], engine: AsyncEngine, rabbit: RabbitProbe
) -> None:
    headers = {"Idempotency-Key": "order-42"}
    first = await api.post("/demo/echo", json={"message": "once"}, headers=headers)
    second = await api.post("/demo/echo", json={"message": "once"}, headers=headers)

    assert first.status_code == second.status_code == 202
    assert first.json()["job_id"] == second.json()["job_id"]
    assert second.headers["Idempotent-Replayed"] == "true"
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(jobs)) == 1
        assert await conn.scalar(select(func.count()).select_from(outbox)) == 1
    ready, _ = await rabbit.depth(rabbit.topology.queues["jobs.default"])
    assert ready == 1

    await workers()
    job = await api.wait_status(first.json()["job_id"], "succeeded")
    assert job["attempts"] == 1


async def test_a_key_reused_with_another_payload_is_a_conflict(api: ApiClient) -> None:
    headers = {"Idempotency-Key": "k"}
    assert (await api.post("/demo/echo", json={"message": "a"}, headers=headers)).status_code == 202

    response = await api.post("/demo/echo", json={"message": "b"}, headers=headers)

    assert response.status_code == 409
    assert "already used" in response.json()["error"]["message"]


async def test_a_batch_key_replays_the_same_request_and_refuses_another(
    api: ApiClient, engine: AsyncEngine
) -> None:
    headers = {"Idempotency-Key": "batch-11"}
    first = await api.post("/demo/batch", json={"count": 2}, headers=headers)
    assert first.status_code == 202, first.text

    again = await api.post("/demo/batch", json={"count": 2}, headers=headers)
    other = await api.post("/demo/batch", json={"count": 2, "fail_times": 1}, headers=headers)

    assert again.status_code == 202, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert other.status_code == 409, other.text
    assert "already used for a different request" in other.json()["error"]["message"]
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(jobs)) == 3


async def test_a_key_that_made_a_batch_is_a_conflict_for_a_job_and_the_reverse(
    api: ApiClient, engine: AsyncEngine
) -> None:
    batch_key = {"Idempotency-Key": "sync-9"}
    assert (await api.post("/demo/batch", json={"count": 2}, headers=batch_key)).status_code == 202
    # The enqueue statement (one per group of requests) leaves the job out.
    reused = await api.post("/demo/echo", json={"message": "a"}, headers=batch_key)
    assert reused.status_code == 409, reused.text
    assert "already used for a batch" in reused.json()["error"]["message"]

    job_key = {"Idempotency-Key": "sync-10"}
    assert (await api.post("/demo/echo", json={"message": "a"}, headers=job_key)).status_code == 202
    reused = await api.post("/demo/batch", json={"count": 2}, headers=job_key)
    assert reused.status_code == 409, reused.text
    assert "already used for a job" in reused.json()["error"]["message"]
    async with engine.connect() as conn:
        # the batch's 2 members and its `then`, and the one job: nothing of the refused two
        assert await conn.scalar(select(func.count()).select_from(jobs)) == 4


async def test_a_transient_failure_is_retried_with_growing_delays_then_succeeds(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    await workers()
    job_id = await api.echo(fail_times=3)

    job = await api.wait_status(job_id, "succeeded")

    assert job["attempts"] == 4
    assert job["result"] == {"echo": "hello"}
    # Each retry as the event feed recorded it (polling the job could miss the shorter
    # waits). The runner set run_after = now + wait, at a `now` after the attempt's
    # `started` change and before its `retrying` change: so the wait lies between what
    # run_after leaves from each of the two, however slow the machine is.
    page = (await api.get("/events", params={"limit": 500})).json()
    mine = [e for e in page["items"] if e["job_id"] == job_id]
    started = {e["attempts"]: _at(e["at"]) for e in mine if e["event"] == "started"}
    retries = {e["attempts"]: e for e in mine if e["event"] == "retrying"}
    assert sorted(retries) == [1, 2, 3]
    for attempt, wait in zip([1, 2, 3], [0.2, 0.4, 0.8], strict=True):  # base 0.2s, no jitter
        run_after = _at(retries[attempt]["run_after"])
        shortest = (run_after - _at(retries[attempt]["at"])).total_seconds()
        longest = (run_after - started[attempt]).total_seconds()
        assert shortest - 0.002 <= wait <= longest + 0.002, (attempt, shortest, longest)
        # and it did wait: the next attempt started no sooner than run_after allows
        assert started[attempt + 1] >= run_after - DUE_TOLERANCE - timedelta(milliseconds=1)


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def test_a_permanent_failure_fails_at_once_without_retry(
    api: ApiClient, workers: Callable[..., Any], rabbit: RabbitProbe
) -> None:
    await workers()
    job_id = await api.echo(permanent=True)

    job = await api.wait_status(job_id, "failed")

    assert job["attempts"] == 1
    assert "permanent error" in job["last_error"]
    dead = await _dead_letters(rabbit, 1)
    assert dead[0].headers["x-jobrail-job-id"] == job_id


async def test_exhausted_retries_fail_the_job_and_dead_letter_it_with_the_reason(
    stack_env: dict[str, str],
    monkeypatch: Any,
    make_api: Callable[..., Any],
    workers: Callable[..., Any],
    rabbit: RabbitProbe,
) -> None:
    from tests.support.fixtures import settings_from

    env = {**stack_env, "JOBRAIL_RETRY__MAX_ATTEMPTS": "3"}
    async with make_api(settings_from(env, monkeypatch)) as api:
        await workers(JOBRAIL_RETRY__MAX_ATTEMPTS="3")
        job_id = await api.echo(fail_times=10)

        job = await api.wait_status(job_id, "failed")

    assert job["attempts"] == 3
    assert "gave up after 3 attempts" in job["last_error"]
    [dead] = await _dead_letters(rabbit, 1)
    assert json.loads(dead.body)["kwargs"]["job_id"] == job_id
    assert "gave up after 3 attempts" in str(dead.headers["x-jobrail-reason"])
    assert dead.headers["x-jobrail-source-queue"] == "jobs.default"


async def _dead_letters(rabbit: RabbitProbe, count: int) -> list[Any]:
    from tests.support.services import wait_for

    collected: list[Any] = []

    async def enough() -> bool:
        collected.extend(await rabbit.drain(rabbit.topology.dead_letter_queue))
        return len(collected) >= count

    await wait_for(enough, timeout=10, what=f"{count} dead letters")
    return collected


async def test_an_enqueue_encodes_its_message_once_for_its_row_and_its_publish(
    api: ApiClient, rabbit: RabbitProbe, monkeypatch: Any
) -> None:
    """The intake encodes the message once and hands that envelope on: the envelope
    written to the outbox row is the one published."""
    import asyncio
    import sys

    from jobrail.transport import codec

    encoded: list[str] = []
    encode = codec.encode

    def counting(message: Any) -> Any:
        encoded.append(str(message.job_id))
        return encode(message)

    # Every module of jobrail that calls the codec's encode, under whatever name.
    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("jobrail"):
            for name, value in list(vars(module).items()):
                if value is encode:
                    monkeypatch.setattr(module, name, counting)

    job_id = await api.echo(message="once")
    for _ in range(200):  # the publish is detached from the 202
        ready, _ = await rabbit.depth(rabbit.topology.queues["jobs.default"])
        if ready:
            break
        await asyncio.sleep(0.02)

    assert ready == 1
    assert encoded == [job_id]
