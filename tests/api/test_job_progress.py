"""Progress a handler reports (ctx.progress), read back through GET /jobs/{id} while the
job runs and after it ended, in embedded mode."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI, Header
from pydantic import BaseModel

from jobrail import JobContext, JobHandle, JobRail
from jobrail.kernel.ids import TenantId
from tests.api.conftest import embedded_settings, migrated
from tests.support.fixtures import ApiClient
from tests.support.services import wait_for

ACME = {"X-Tenant": "acme"}


class Import(BaseModel):
    rows: int
    fail: bool = False


async def host_tenant(x_tenant: Annotated[str, Header()]) -> TenantId:
    return TenantId(x_tenant)


class Host:
    def __init__(self, importer: JobHandle[Import], http: httpx.AsyncClient) -> None:
        self.importer = importer
        self.http = http
        self.halfway = asyncio.Event()
        self.go_on = asyncio.Event()

    async def job(self, job_id: object) -> dict[str, Any]:
        response = await self.http.get(f"/jobs/{job_id}", headers=ACME)
        assert response.status_code == 200
        body: dict[str, Any] = response.json()
        return body

    async def finished(self, job_id: object) -> dict[str, Any]:
        async def done() -> dict[str, Any] | None:
            body = await self.job(job_id)
            return body if body["finished_at"] else None

        result: dict[str, Any] = await wait_for(done, timeout=10, what="the job to finish")
        return result


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    settings = embedded_settings(
        tmp_path, modules=[], scheduler={"embedded": False}, jobs={"progress_interval_ms": 50}
    )
    rail = JobRail(await migrated(settings))
    host: Host

    @rail.job("tests.import", payload=Import, max_attempts=1)
    async def importer(payload: Import, ctx: JobContext) -> dict[str, int]:
        """Reports every row, pauses halfway until the test has looked."""
        for row in range(1, payload.rows + 1):
            await ctx.progress(row, payload.rows, f"row {row}")
            if row == payload.rows // 2:
                host.halfway.set()
                await host.go_on.wait()
        if payload.fail:
            from jobrail import PermanentError

            raise PermanentError("the last row is malformed")
        return {"rows": payload.rows}

    app = FastAPI(lifespan=rail.lifespan)
    app.include_router(rail.router(tenant=host_tenant))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://host") as http,
    ):
        host = Host(importer, http)
        yield host


async def test_progress_is_read_while_the_job_runs_and_after_it_ended(host: Host) -> None:
    job_id = (await host.importer.enqueue(Import(rows=1000), tenant_id="acme")).job.id
    await asyncio.wait_for(host.halfway.wait(), timeout=10)

    async def halfway_written() -> dict[str, Any] | None:
        body = await host.job(job_id)
        return body if body["progress"] and body["progress"]["current"] == 500 else None

    running = await wait_for(halfway_written, timeout=5, what="progress 500 to be written")
    host.go_on.set()
    done = await host.finished(job_id)
    listed = (await host.http.get("/jobs", headers=ACME)).json()["items"]

    assert running["status"] == "running"
    assert running["progress"]["total"] == 1000
    assert running["progress"]["message"] == "row 500"
    assert done["status"] == "succeeded"
    assert {k: done["progress"][k] for k in ("current", "total", "message")} == {
        "current": 1000,
        "total": 1000,
        "message": "row 1000",
    }
    assert done["progress"]["updated_at"] >= running["progress"]["updated_at"]
    assert listed[0]["progress"] == done["progress"]


async def test_a_failed_job_shows_how_far_it_got(host: Host) -> None:
    host.go_on.set()
    job_id = (await host.importer.enqueue(Import(rows=10, fail=True), tenant_id="acme")).job.id

    done = await host.finished(job_id)

    assert done["status"] == "failed"
    assert (done["progress"]["current"], done["progress"]["total"]) == (10, 10)


async def test_a_job_that_reports_nothing_has_null_progress(host: Host) -> None:
    job_id = (await host.importer.enqueue(Import(rows=0), tenant_id="acme")).job.id

    done = await host.finished(job_id)

    assert done["status"] == "succeeded"
    assert done["progress"] is None


async def test_the_demo_job_reports_the_time_it_slept(api: ApiClient) -> None:
    job_id = await api.echo(sleep_ms=600)

    async def reported() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(f"/jobs/{job_id}")).json()
        return body if body["progress"] else None

    running = await wait_for(reported, timeout=5, what="the demo job's first progress")
    done = await api.wait_status(job_id, "succeeded", timeout=5)

    assert running["progress"]["total"] == 600
    assert 0 < running["progress"]["current"] <= 600
    assert (done["progress"]["current"], done["progress"]["message"]) == (600, "sleeping")
