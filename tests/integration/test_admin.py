"""Operator endpoints on the real services: queues, the DLQ, lock holders, the overview."""

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.api.app import runtime_of
from jobrail.limits.model import Acquire, LimitsBackend, Lock
from jobrail.persistence.tables import jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.recorder import Recorder
from tests.support.services import wait_for


@pytest.fixture
def admin_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_MODULES": "jobrail.demo,tests.support.jobs",
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
    async with make_api(settings_from(admin_env, monkeypatch)) as client:
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
    old = await workers("old", JOBRAIL_MODULES="jobrail.demo")
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
    assert unknown.json() == {"redriven": 0, "kept": 0, "items": []}
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
