"""Operator endpoints on the real services: queues, the DLQ (listing, redrive, purge, one
letter per failed job), lock holders, the overview."""

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import aio_pika
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import JobId
from jobrail.limits.model import Acquire, LimitsBackend, Lock
from jobrail.runtime.app import runtime_of
from jobrail.store.tables import jobs, outbox
from jobrail.transport.codec import HEADER_JOB_ID, dead_letter
from tests.support.apps import test_jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.recorder import Recorder
from tests.support.services import wait_for
from tests.support.wire import job_envelope


@pytest.fixture
def admin_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": "tests.support.apps:test_jobs",
        "JOBRAIL_RETRY__MAX_ATTEMPTS": "1",
    }


@pytest.fixture
def worker_env(admin_env: dict[str, str]) -> dict[str, str]:
    return admin_env


@pytest.fixture
async def ops_api(
    admin_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: RabbitProbe,
) -> Any:
    async with make_api(settings_from(admin_env, monkeypatch), test_jobs.modules) as client:
        yield client


async def test_the_dlq_is_listed_in_place_and_failed_jobs_in_it_are_redriven(
    ops_api: ApiClient, workers: Any, rabbit: RabbitProbe
) -> None:
    await workers()
    admin = await ops_api.auth("ops", admin=True)
    failed = await ops_api.echo(message="x", fail_times=1)  # one attempt allowed: it fails
    await ops_api.wait_status(failed, "failed")
    await rabbit.publish_raw(rabbit.topology.queues["jobs.default"], b"not json")

    async def two_letters() -> Any:
        listed = (await ops_api.get("/admin/dlq", headers=admin)).json()["items"]
        return listed if len(listed) == 2 else None

    listed = await wait_for(two_letters, what="two dead letters")
    again = (await ops_api.get("/admin/dlq", headers=admin)).json()["items"]
    redriven = await ops_api.post("/admin/dlq/redrive", json={"all": True}, headers=admin)
    after = await ops_api.wait_status(failed, "failed")  # it ran again, and failed again

    by_job = {letter["job_id"]: letter for letter in listed}
    assert "gave up after 1 attempts" in by_job[failed]["reason"]
    assert by_job[failed]["job_type"] == "demo.echo"
    assert by_job[None]["reason"].startswith("malformed message")
    assert by_job[None]["preview"] == "not json"
    assert [letter["id"] for letter in again] == [letter["id"] for letter in listed]
    assert redriven.status_code == 200, redriven.text
    result = redriven.json()
    assert (result["redriven"], result["kept"]) == (1, 1)
    kept = next(item for item in result["items"] if item["outcome"] == "kept")
    assert kept["detail"] == "not a job message"
    assert after["attempts"] == 1
    # The old letter of the job left the DLQ; its new failure and the poison are there.
    remaining = (await ops_api.get("/admin/dlq", headers=admin)).json()["items"]
    assert sorted(str(letter["job_id"]) for letter in remaining) == sorted([failed, "None"])
    assert by_job[failed]["id"] not in {letter["id"] for letter in remaining}


async def test_a_job_no_worker_knows_fails_with_why_and_runs_once_redriven(
    ops_api: ApiClient, workers: Any, rabbit: RabbitProbe
) -> None:
    # A worker deployed without the module of a job type the API already takes.
    old = await workers("old", JOBRAIL_APP="")
    admin = await ops_api.auth("ops", admin=True)
    with Recorder() as recorder:
        job = await ops_api.enqueue("test.vendor_call", {"url": recorder.url, "n": 1})
        failed = await ops_api.wait_status(job, "failed")

        async def its_letter() -> Any:
            listed = (await ops_api.get("/admin/dlq", headers=admin)).json()["items"]
            return [letter for letter in listed if letter["job_id"] == job] or None

        [letter] = await wait_for(its_letter, what="the job's dead letter")
        old.stop()
        await workers("new")  # one that knows the type
        redriven = await ops_api.post("/admin/dlq/redrive", json={"all": True}, headers=admin)
        done = await ops_api.wait_status(job, "succeeded")

        assert failed["attempts"] == 1
        assert failed["last_error"].endswith(
            "no worker here runs job type 'test.vendor_call': deploy one that does, "
            "then redrive the job"
        )
        assert letter["reason"] == failed["last_error"]
        assert letter["job_type"] == "test.vendor_call"
        assert (redriven.json()["redriven"], redriven.json()["kept"]) == (1, 0)
        assert done["attempts"] == 1
        assert [call.params["n"] for call in recorder.calls] == ["1"]


async def test_redrive_by_id_and_bad_requests(ops_api: ApiClient, rabbit: RabbitProbe) -> None:
    admin = await ops_api.auth("ops", admin=True)
    await rabbit.publish_raw(rabbit.topology.dead_letter_queue, b"{}")

    neither = await ops_api.post("/admin/dlq/redrive", json={}, headers=admin)
    both = await ops_api.post("/admin/dlq/redrive", json={"all": True, "ids": ["x"]}, headers=admin)
    unknown = await ops_api.post("/admin/dlq/redrive", json={"ids": ["nope"]}, headers=admin)

    assert neither.status_code == both.status_code == 422
    # Said, not answered as a redrive of nothing.
    assert unknown.json() == {
        "redriven": 0,
        "removed": 0,
        "kept": 0,
        "items": [],
        "not_found": ["nope"],
    }
    assert len((await ops_api.get("/admin/dlq", headers=admin)).json()["items"]) == 1


async def test_queues_lock_holders_and_overview(
    ops_api: ApiClient, workers: Any, engine: AsyncEngine
) -> None:
    await workers()
    admin = await ops_api.auth("ops", admin=True)
    done = await ops_api.echo(message="ok")
    failed = await ops_api.echo(message="x", permanent=True)
    await ops_api.wait_status(done, "succeeded")
    await ops_api.wait_status(failed, "failed")

    async def outbox_drained() -> bool:  # the failed job's dead letter is published
        async with engine.connect() as conn:
            waiting = await conn.scalar(
                select(func.count()).select_from(outbox).where(outbox.c.published_at.is_(None))
            )
        return not waiting

    await wait_for(outbox_drained, what="the dead letter to leave the outbox")
    backend = await runtime_of(ops_api.app).container.get(LimitsBackend)
    lock = Lock(key="resource:{resource}", ttl_s=30)
    await backend.admit([Acquire(lock, "resource:r1")], holder="holder-1")

    queues = (await ops_api.get("/admin/queues", headers=admin)).json()["items"]
    held = await ops_api.get(
        "/admin/limits/test.exclusive/lock/holders", params={"key": "resource:r1"}, headers=admin
    )
    reset = await ops_api.post(
        "/admin/limits/test.exclusive/lock/reset", params={"key": "resource:r1"}, headers=admin
    )
    freed = await ops_api.get(
        "/admin/limits/test.exclusive/lock/holders", params={"key": "resource:r1"}, headers=admin
    )
    overview = (await ops_api.get("/admin/overview", headers=admin)).json()
    async with engine.connect() as conn:
        in_db = dict(
            (await conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status))).all()
        )

    assert {q["queue"] for q in queues} == {
        "jobs.default",
        "jobs.high",
        "jobs.io",
        "jobs.heavy",
        "jobs.dlq",
    }
    assert next(q for q in queues if q["queue"] == "jobs.default")["consumers"] == 1
    assert [h["holder"] for h in held.json()["holders"]] == ["holder-1"]
    assert reset.json()["reset"] is True
    assert freed.json()["holders"] == []
    shown = {(c["type"], c["status"]): c["count"] for c in overview["counts"]}
    assert shown == {("demo.echo", status): n for status, n in in_db.items()}
    assert [f["id"] for f in overview["failures"]] == [failed]
    assert overview["outbox_lag_s"] == 0
    assert next(q for q in overview["queues"] if q["queue"] == "jobs.dlq")["ready"] == 1
    unknown_limit = await ops_api.get(
        "/admin/limits/test.exclusive/nope/holders", params={"key": "k"}, headers=admin
    )
    assert unknown_limit.status_code == 404
    assert "has no limit 'nope'" in unknown_limit.json()["error"]["message"]


async def _letters(api: ApiClient, admin: dict[str, str], job_id: str | None = None) -> Any:
    listed = (await api.get("/admin/dlq", params={"limit": 1000}, headers=admin)).json()["items"]
    return [letter for letter in listed if job_id is None or letter["job_id"] == job_id]


async def _message_ids(engine: AsyncEngine, job_id: str) -> list[str]:
    """The AMQP message ids of the job's messages on the work queue, oldest first (every
    message jobrail publishes is an outbox row under its message id)."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(outbox.c.id, outbox.c.headers)
                .where(outbox.c.queue == "jobs.default")
                .order_by(outbox.c.created_at)
            )
        ).all()
    return [str(row.id) for row in rows if row.headers.get(HEADER_JOB_ID) == job_id]


async def _new_letter(api: ApiClient, admin: dict[str, str], job_id: str, old: str) -> Any:
    async def replaced() -> Any:
        letters = await _letters(api, admin, job_id)
        return letters if old not in {letter["id"] for letter in letters} and letters else None

    return await wait_for(replaced, timeout=20, what=f"a new dead letter of {job_id}")


def _only_its_new_failure_kept(result: dict[str, Any]) -> None:
    """A fast worker may fail the redriven job again while the same pass still runs: the
    pass then sees the new letter, and keeps it (it never redrives a job twice)."""
    kept = [item for item in result["items"] if item["outcome"] == "kept"]
    assert result["kept"] == len(kept) <= 1, result
    assert all(item["detail"] == "it failed again after this redrive" for item in kept), result


async def test_a_job_failed_redriven_and_failed_again_has_one_dead_letter_with_its_message_id(
    ops_api: ApiClient, workers: Any, engine: AsyncEngine
) -> None:
    await workers()
    admin = await ops_api.auth("ops", admin=True)
    job = await ops_api.echo(message="x", permanent=True)  # fails at every attempt
    await ops_api.wait_status(job, "failed")
    [first] = await wait_for(lambda: _letters(ops_api, admin, job), what="the first letter")

    by_job = await ops_api.post(f"/jobs/{job}/redrive", headers=admin)
    second = await _new_letter(ops_api, admin, job, first["id"])
    by_dlq = await ops_api.post("/admin/dlq/redrive", json={"all": True}, headers=admin)
    third = await _new_letter(ops_api, admin, job, second[0]["id"])
    messages = await _message_ids(engine, job)

    assert by_job.status_code == 202, by_job.text
    assert len(second) == 1
    assert (by_dlq.json()["redriven"], by_dlq.json()["removed"]) == (1, 0)
    _only_its_new_failure_kept(by_dlq.json())
    assert len(third) == 1
    # Each letter is the message that ran the last attempt, under its own id: the
    # enqueue's, then each redrive's.
    assert [first["id"], second[0]["id"], third[0]["id"]] == messages
    assert third[0]["job_failed_at"] == (await ops_api.job(job))["finished_at"]


async def test_a_stale_letter_left_behind_is_removed_by_a_dlq_redrive_not_reported(
    ops_api: ApiClient, workers: Any, rabbit: RabbitProbe
) -> None:
    await workers()
    admin = await ops_api.auth("ops", admin=True)
    job = await ops_api.echo(message="x", permanent=True)
    failed = await ops_api.wait_status(job, "failed")
    [current] = await wait_for(lambda: _letters(ops_api, admin, job), what="its letter")
    # The letter of an earlier failure of the job that a redrive left behind (as every
    # redrive did before dead letters named their failure).
    finished = datetime.fromisoformat(failed["finished_at"])
    message = job_envelope(
        job_id=JobId(uuid.UUID(job)), job_type="demo.echo", queue="jobs.default", tenant_id="t"
    )
    stale = dead_letter(
        body=message.body,
        reason="an earlier failure",
        source_queue="jobs.default",
        dead_letter_queue="jobs.dlq",
        at=finished - timedelta(minutes=5),
        headers=message.headers,
        job_failed_at=finished - timedelta(minutes=5),
    )
    await rabbit.channel.default_exchange.publish(
        aio_pika.Message(body=stale.body, headers=dict(stale.headers), message_id="stale-1"),
        routing_key=rabbit.topology.dead_letter_queue,
    )

    redriven = await ops_api.post("/admin/dlq/redrive", json={"all": True}, headers=admin)
    [again] = await _new_letter(ops_api, admin, job, current["id"])

    result = redriven.json()
    assert (result["redriven"], result["removed"]) == (1, 1), result
    _only_its_new_failure_kept(result)
    outcome = {item["id"]: item for item in result["items"]}
    assert outcome["stale-1"]["outcome"] == "removed"
    assert outcome[current["id"]]["outcome"] == "redriven"
    assert again["id"] != "stale-1"


async def test_purge_the_dlq_by_job_type_reason_or_all(
    ops_api: ApiClient, workers: Any, rabbit: RabbitProbe
) -> None:
    await workers()
    admin = await ops_api.auth("ops", admin=True)
    permanent = await ops_api.echo(message="x", permanent=True)
    gave_up = await ops_api.echo(message="y", fail_times=1)
    await rabbit.publish_raw(rabbit.topology.dead_letter_queue, b"poison")
    for job in (permanent, gave_up):
        await ops_api.wait_status(job, "failed")

    async def three() -> bool:
        return len(await _letters(ops_api, admin)) == 3

    await wait_for(three, timeout=20, what="three letters")

    async def purge(body: dict[str, Any]) -> Any:
        return await ops_api.post("/admin/dlq/purge", json=body, headers=admin)

    nobody = await purge({"job_id": str(uuid.uuid4())})
    by_reason = await purge({"reason": "gave up after 1 attempts"})
    by_job = await purge({"job_id": permanent, "job_type": "demo.echo"})
    left = await _letters(ops_api, admin)
    everything = await purge({"all": True})
    bad = [
        await purge(body)
        for body in ({}, {"all": True, "reason": "x"}, {"all": "yes"}, {"job_id": "nope"})
    ]

    assert nobody.json() == {"purged": 0, "complete": True}
    assert by_reason.json() == {"purged": 1, "complete": True}
    assert by_job.json() == {"purged": 1, "complete": True}
    assert [letter["preview"] for letter in left] == ["poison"]
    assert everything.json() == {"purged": 1, "complete": True}
    assert await _letters(ops_api, admin) == []
    assert [r.status_code for r in bad] == [422] * 4
    # The jobs stay failed: purging a letter is not redriving or deleting its job.
    assert (await ops_api.job(permanent))["status"] == "failed"


async def test_a_poison_message_is_dead_lettered_under_its_own_message_id(
    ops_api: ApiClient, workers: Any, rabbit: RabbitProbe
) -> None:
    await workers()
    admin = await ops_api.auth("ops", admin=True)
    await rabbit.channel.default_exchange.publish(
        aio_pika.Message(body=b"not json", message_id="poison-7"),
        routing_key=rabbit.topology.queues["jobs.default"],
    )

    [letter] = await wait_for(lambda: _letters(ops_api, admin), what="the poison's letter")

    assert letter["id"] == "poison-7"
    assert letter["reason"].startswith("malformed message")
