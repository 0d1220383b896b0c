"""JobRail.router in a bare host app: the jobs routes scoped by the host's own tenant
dependency (or jobrail's API keys), every error JSON without jobrail's handlers."""

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import httpx
import pytest
from fastapi import FastAPI, Header, HTTPException

from jobrail import JobHandle, JobRail
from jobrail.kernel.ids import TenantId
from jobrail.tenants.use_cases import CreateTenant
from tests.api.conftest import embedded_settings, migrated
from tests.support.host_app import RenderReport, declare_jobs
from tests.support.services import wait_for


async def host_tenant(x_tenant: Annotated[str | None, Header()] = None) -> TenantId:
    """The host's own authentication: here, a header naming the tenant."""
    if x_tenant is None:
        raise HTTPException(401, "who are you?")
    return TenantId(x_tenant)


class Host:
    def __init__(
        self, rail: JobRail, render: JobHandle[RenderReport], http: httpx.AsyncClient
    ) -> None:
        self.rail = rail
        self.render = render
        self.http = http


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=[])))
    render = declare_jobs(rail)
    app = FastAPI(lifespan=rail.lifespan)
    app.include_router(rail.router(tenant=host_tenant))
    app.include_router(rail.router(prefix="/keyed/jobs"))  # jobrail's API keys

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("the host's own error")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://host") as http,
    ):
        yield Host(rail, render, http)


async def test_the_host_tenant_reads_and_lists_its_jobs(host: Host) -> None:
    job = (await host.render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme")).job
    acme = {"X-Tenant": "acme"}

    async def succeeded() -> dict[str, object] | None:
        body: dict[str, object] = (await host.http.get(f"/jobs/{job.id}", headers=acme)).json()
        return body if body["status"] == "succeeded" else None

    status = await wait_for(succeeded, timeout=10, what="the job to succeed")
    listed = await host.http.get("/jobs", params={"type": "reports.render"}, headers=acme)

    assert status["result"] == {"pages": 1, "attempt": 1}
    assert listed.status_code == 200
    assert [item["id"] for item in listed.json()["items"]] == [str(job.id)]


async def test_a_batch_member_shows_its_batch_as_on_jobrails_api(host: Host) -> None:
    from jobrail.jobs.flow_service import FlowService
    from jobrail.jobs.workflows import BatchCommand, FlowJob

    flows = await host.rail.container.get(FlowService)
    member = FlowJob("reports.render", {"report_id": "r-1"})
    started = await flows.batch(BatchCommand(tenant_id=TenantId("acme"), jobs=[member]))

    body = (
        await host.http.get(f"/jobs/{started.members[0].id}", headers={"X-Tenant": "acme"})
    ).json()

    assert body["flow"]["id"] == str(started.flow.id)
    assert (body["flow"]["kind"], body["flow"]["role"]) == ("batch", "member")
    assert body["flow"]["counts"]["total"] == 1


async def test_another_tenants_job_is_a_json_404(host: Host) -> None:
    job = (await host.render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme")).job

    other = await host.http.get(f"/jobs/{job.id}", headers={"X-Tenant": "globex"})
    cancel = await host.http.post(f"/jobs/{job.id}/cancel", headers={"X-Tenant": "globex"})
    listed = await host.http.get("/jobs", headers={"X-Tenant": "globex"})

    assert (other.status_code, other.json()["error"]["code"]) == (404, "not_found")
    assert (cancel.status_code, cancel.json()["error"]["code"]) == (404, "not_found")
    assert listed.json()["items"] == []


async def test_a_pending_job_is_cancelled(host: Host) -> None:
    from datetime import UTC, datetime, timedelta

    later = datetime.now(UTC) + timedelta(hours=1)
    job = (
        await host.render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme", run_after=later)
    ).job

    cancelled = await host.http.post(f"/jobs/{job.id}/cancel", headers={"X-Tenant": "acme"})

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"


async def test_every_error_is_json_in_a_host_without_jobrails_handlers(host: Host) -> None:
    acme = {"X-Tenant": "acme"}

    anonymous = await host.http.get(f"/jobs/{uuid.uuid4()}")
    bad_id = await host.http.get("/jobs/not-a-uuid", headers=acme)
    bad_cursor = await host.http.get("/jobs", params={"cursor": "nope"}, headers=acme)
    bad_limit = await host.http.get("/jobs", params={"limit": 0}, headers=acme)
    host_own = await host.http.get("/boom")

    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "unauthorized")
    assert anonymous.json()["error"]["message"] == "who are you?"
    assert (bad_id.status_code, bad_id.json()["error"]["code"]) == (422, "validation_error")
    assert (bad_cursor.status_code, bad_cursor.json()["error"]["code"]) == (422, "invalid_input")
    assert (bad_limit.status_code, bad_limit.json()["error"]["code"]) == (422, "validation_error")
    # The host's own routes keep the host's own error handling.
    assert host_own.status_code == 500
    assert host_own.headers["content-type"].startswith("text/plain")


async def test_an_unexpected_error_in_the_routes_is_a_json_500(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobrail.jobs.listing import ListJobs

    async def broken(self: ListJobs, query: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ListJobs, "__call__", broken)

    response = await host.http.get("/jobs", headers={"X-Tenant": "acme"})

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"


async def test_jobrails_api_keys_are_one_provider_of_the_tenant(host: Host) -> None:
    issued = await (await host.rail.container.get(CreateTenant))("acme")
    job = (await host.render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme")).job

    keyed = await host.http.get(
        f"/keyed/jobs/{job.id}", headers={"Authorization": f"Bearer {issued.api_key}"}
    )
    refused = await host.http.get(
        f"/keyed/jobs/{job.id}", headers={"Authorization": "Bearer jr_not-a-key"}
    )
    anonymous = await host.http.get(f"/keyed/jobs/{job.id}")

    assert (keyed.status_code, keyed.json()["id"]) == (200, str(job.id))
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "unauthorized")
    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "unauthorized")


async def test_the_host_tenant_reads_its_jobs_events(host: Host) -> None:
    job = (await host.render.enqueue(RenderReport(report_id="r-2"), tenant_id="acme")).job
    acme = {"X-Tenant": "acme"}

    async def ended() -> list[str] | None:
        page = (await host.http.get(f"/jobs/{job.id}/events", headers=acme)).json()
        names = [event["event"] for event in page["items"]]
        return names if names and names[-1] == "succeeded" else None

    names = await wait_for(ended, timeout=10, what="the job's events to end")
    other = await host.http.get(f"/jobs/{job.id}/events", headers={"X-Tenant": "globex"})
    after_the_end = await host.http.get(
        f"/jobs/{job.id}/events",
        headers={**acme, "Accept": "text/event-stream"},
        params={
            "after": (await host.http.get(f"/jobs/{job.id}/events", headers=acme)).json()[
                "last_event_id"
            ]
        },
    )

    assert names[0] == "enqueued"
    assert "started" in names
    assert other.status_code == 404
    assert after_the_end.status_code == 204  # ended, nothing follows


async def test_a_missing_tenant_header_is_one_error_not_one_per_dependant(
    tmp_path: Path,
) -> None:
    # The route's rate limit and its endpoint both take the tenant: FastAPI reported the
    # missing header once for each.
    async def required_tenant(x_tenant: Annotated[str, Header()]) -> TenantId:
        return TenantId(x_tenant)

    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=[])))
    app = FastAPI()
    app.include_router(rail.router(tenant=required_tenant))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://host"
    ) as http:
        answer = await http.get(f"/jobs/{uuid.uuid4()}")

    assert answer.status_code == 422
    assert answer.json()["error"]["details"] == [
        {"loc": ["header", "x-tenant"], "msg": "Field required", "type": "missing"}
    ]
