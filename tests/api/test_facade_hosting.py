"""jobrail inside a host's FastAPI app: the rail's lifespan around the host's, jobrail's
app mounted under a prefix, and jobrail's jobs router included with setup_dishka."""

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from dishka import AsyncContainer
from dishka.integrations.fastapi import setup_dishka
from fastapi import FastAPI

from jobrail import JobRail
from jobrail.jobs import api as jobs_api
from jobrail.runtime.app import create_app, runtime_of
from jobrail.tenants.use_cases import CreateTenant
from tests.api.conftest import embedded_settings, migrated
from tests.api.test_facade import finished
from tests.support.apps import REFERENCE
from tests.support.host_app import RenderReport, declare_jobs
from tests.support.services import wait_for


async def api_key(container: AsyncContainer, tenant: str) -> dict[str, str]:
    issued = await (await container.get(CreateTenant))(tenant)
    return {"Authorization": f"Bearer {issued.api_key}"}


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host")


async def test_install_runs_the_rail_around_the_host_lifespan(tmp_path: Path) -> None:
    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=[])))
    render = declare_jobs(rail)
    seen: list[str] = []

    @asynccontextmanager
    async def host_lifespan(_app: FastAPI) -> AsyncIterator[None]:
        seen.append("host started")
        yield
        seen.append("host stopped")

    app = FastAPI(lifespan=host_lifespan)
    rail.install(app)

    async with app.router.lifespan_context(app):
        result = await render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme")
        job = await finished(rail, "acme", result.job.id)

    assert job.status.value == "succeeded"
    assert seen == ["host started", "host stopped"]


async def test_an_installed_rail_serves_again_after_its_lifespan_ended(tmp_path: Path) -> None:
    # As a test suite does, entering TestClient(app) in each test: the second lifespan
    # ran on the first's closed runtime, and its jobs stayed pending without an error.
    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=[])))
    render = declare_jobs(rail)
    app = FastAPI()
    rail.install(app)

    for run in range(2):
        async with app.router.lifespan_context(app):
            result = await render.enqueue(RenderReport(report_id=f"r-{run}"), tenant_id="acme")
            job = await finished(rail, "acme", result.job.id)
        assert job.status.value == "succeeded", run


async def test_the_app_of_a_rail_serves_once_and_says_so_after(tmp_path: Path) -> None:
    import pytest

    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=[])))
    declare_jobs(rail)
    app = rail.app()
    async with app.router.lifespan_context(app):
        pass

    with pytest.raises(RuntimeError, match="has run its lifespan already"):
        async with app.router.lifespan_context(app):
            pass


async def test_mounted_without_its_lifespan_the_jobs_routes_answer(tmp_path: Path) -> None:
    jobrail_app = create_app(await migrated(embedded_settings(tmp_path)), modules=REFERENCE)
    host = FastAPI()
    host.mount("/jobrail", jobrail_app)  # a mounted app's lifespan never runs
    container = runtime_of(jobrail_app).container
    try:
        headers = await api_key(container, "acme")
        async with client(host) as http:
            listed = await http.get("/jobrail/jobs", headers=headers)
            unknown = await http.get(f"/jobrail/jobs/{uuid.uuid4()}", headers=headers)
            anonymous = await http.get("/jobrail/jobs")
    finally:
        await container.close()

    assert (listed.status_code, listed.json()) == (200, {"items": [], "next_cursor": None})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthorized"


async def test_a_mounted_app_says_where_its_jobs_are_under_the_prefix(tmp_path: Path) -> None:
    jobrail_app = create_app(await migrated(embedded_settings(tmp_path, modules=["demo"])))

    @asynccontextmanager
    async def host_lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with jobrail_app.router.lifespan_context(jobrail_app):
            yield

    host = FastAPI(lifespan=host_lifespan)
    host.mount("/jobrail", jobrail_app)
    demo = {"Authorization": "Bearer demo-key"}  # the embedded mode's seeded key

    async with host.router.lifespan_context(host), client(host) as http:
        accepted = await http.post("/jobrail/demo/echo", json={"message": "hi"}, headers=demo)
        location = accepted.headers["Location"]
        status = await http.get(location, headers=demo)

    assert accepted.status_code == 202
    assert location == f"/jobrail/jobs/{accepted.json()['job_id']}"
    assert status.status_code == 200
    assert status.json()["id"] == accepted.json()["job_id"]


async def test_the_rails_whole_api_mounted_runs_in_the_hosts_lifespan(tmp_path: Path) -> None:
    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=["demo"])))
    host = FastAPI(lifespan=rail.lifespan)
    host.mount("/jobrail", rail.app())
    demo = {"Authorization": "Bearer demo-key"}

    async with host.router.lifespan_context(host), client(host) as http:
        accepted = await http.post("/jobrail/demo/echo", json={"message": "hi"}, headers=demo)
        location = accepted.headers["Location"]

        async def done() -> dict[str, object] | None:
            body: dict[str, object] = (await http.get(location, headers=demo)).json()
            return body if body["status"] == "succeeded" else None

        finished = await wait_for(done, timeout=10, what="the demo job to succeed")

    assert accepted.status_code == 202
    assert location == f"/jobrail/jobs/{accepted.json()['job_id']}"
    assert finished["result"] == {"echo": "hi"}


async def test_the_jobs_router_in_a_host_app_answers_in_json(tmp_path: Path) -> None:
    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=[])))
    render = declare_jobs(rail)
    host = FastAPI(lifespan=rail.lifespan)  # none of jobrail's error handlers
    host.include_router(jobs_api.router)
    setup_dishka(rail.container, host)

    async with host.router.lifespan_context(host), client(host) as http:
        headers = await api_key(rail.container, "acme")
        job = (await render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme")).job
        found = await http.get(f"/jobs/{job.id}", headers=headers)
        unknown = await http.get(f"/jobs/{uuid.uuid4()}", headers=headers)
        anonymous = await http.get(f"/jobs/{job.id}")
        invalid = await http.get("/jobs/not-a-uuid", headers=headers)

    assert (found.status_code, found.json()["type"]) == (200, "reports.render")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "unauthorized")
    assert anonymous.headers["WWW-Authenticate"] == "Bearer"
    assert (invalid.status_code, invalid.json()["error"]["code"]) == (422, "validation_error")
