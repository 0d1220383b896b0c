"""Pause and resume (jobrail.dispatch.pauses) through the admin API, in the embedded
mode, with fair dispatch on and off: nothing paused starts, the rest goes on, a waiting
job says what holds it, a deadline passes as usual, and the resume releases the rest."""

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import create_app, runtime_of
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fair_starts import module, started
from tests.support.fixtures import ApiClient
from tests.support.services import wait_for


@pytest.fixture(params=[True, False], ids=["dispatch", "no-dispatch"])
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ApiClient]:
    settings = embedded_settings(
        tmp_path,
        dispatch={"enabled": request.param, "rediscover_s": 0.5},
        outbox={"relay_interval_s": 0.2},
    )
    app = create_app(await migrated(settings), modules=[*REFERENCE, module])
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client


async def _enqueue(api: ApiClient, tenant: str, path: str, deadline: datetime | None = None) -> str:
    async with runtime_of(api.app).container() as request:
        enqueue = await request.get(EnqueueJob)
        result = await enqueue(
            EnqueueJobCommand(
                tenant_id=TenantId(tenant),
                type="test.fair_step",
                payload={"path": path},
                deadline=deadline,
            )
        )
    return str(result.job.id)


def _started(path: str, tenant: str, count: int) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return sum(t == tenant for t, _ in started(path)) >= count

    return reached


async def test_a_paused_tenant_s_jobs_wait_and_start_once_it_is_resumed(
    api: ApiClient, tmp_path: Path
) -> None:
    admin = await api.auth("ops", admin=True)
    as_a = await api.auth("a")
    path = str(tmp_path / "starts")
    paused = await api.post("/admin/pauses", json={"scope": "tenant", "value": "a"}, headers=admin)
    a_jobs = [await _enqueue(api, "a", path) for _ in range(3)]
    soon = datetime.now(UTC) + timedelta(seconds=1)
    late = await _enqueue(api, "a", path, deadline=soon)
    b_jobs = [await _enqueue(api, "b", path) for _ in range(3)]

    await wait_for(_started(path, "b", 3), timeout=30, what="b's jobs to start")
    expired = await api.wait_status(late, "expired", timeout=30, headers=as_a)
    waiting = await api.job(a_jobs[0], headers=as_a)
    listed = await api.get("/admin/pauses", headers=admin)

    assert paused.status_code == 201, paused.text
    assert paused.json()["recalled"] == 0
    assert [t for t, _ in started(path)].count("a") == 0, "a paused tenant's job started"
    assert waiting["status"] == "pending"
    assert waiting["paused"]["scope"] == "tenant"
    assert waiting["paused"]["value"] == "a"
    assert expired["last_error"] == "not started by its deadline"
    assert [(p["scope"], p["value"]) for p in listed.json()["items"]] == [("tenant", "a")]

    resumed = await api.delete("/admin/pauses/tenant/a", headers=admin)
    assert resumed.status_code == 200, resumed.text
    await wait_for(_started(path, "a", 3), timeout=30, what="a's jobs to start after the resume")
    for job_id in a_jobs:
        done = await api.wait_status(job_id, "succeeded", timeout=30, headers=as_a)
        assert done["paused"] is None
    assert sorted(j for t, j in started(path) if t == "a") == sorted(a_jobs)
    assert sorted(j for t, j in started(path) if t == "b") == sorted(b_jobs)


async def test_pauses_refuse_what_does_not_exist_and_answer_admins_only(api: ApiClient) -> None:
    admin = await api.auth("ops", admin=True)
    tenant = await api.auth("acme")

    def pause(scope: str, value: str) -> Awaitable[httpx.Response]:
        return api.post("/admin/pauses", json={"scope": scope, "value": value}, headers=admin)

    unknown_queue = await pause("queue", "jobs.nowhere")
    unknown_type = await pause("type", "no.such.type")
    unknown_scope = await pause("planet", "earth")
    not_paused = await api.delete("/admin/pauses/queue/jobs.default", headers=admin)
    not_admin = await api.post(
        "/admin/pauses", json={"scope": "tenant", "value": "x"}, headers=tenant
    )
    queue = await pause("queue", "jobs.default")
    twice = await pause("queue", "jobs.default")

    for refused in (unknown_queue, unknown_type, unknown_scope):
        assert refused.status_code == 422, refused.text
    assert "no queue 'jobs.nowhere'" in unknown_queue.json()["error"]["message"]
    assert not_paused.status_code == 404
    assert not_paused.json()["error"]["code"] == "not_found"
    assert not_admin.status_code == 403
    assert queue.status_code == twice.status_code == 201
    assert queue.json()["paused_at"] == twice.json()["paused_at"]
