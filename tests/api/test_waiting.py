"""A job its lock defers says, on GET /jobs/{id}, what it waits for and when it tries
again, and stops saying it once it runs; a job type may cap the wait (embedded mode)."""

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from jobrail import JobContext, JobRail, Lock
from tests.api.conftest import embedded_settings, migrated
from tests.support.services import wait_for


class Render(BaseModel):
    report_id: str


async def tenant() -> str:
    return "acme"


class Host:
    def __init__(self, rail: JobRail, http: httpx.AsyncClient) -> None:
        self.rail, self.http = rail, http
        self.release = asyncio.Event()

    async def job(self, job_id: str) -> dict[str, Any]:
        response = await self.http.get(f"/jobs/{job_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def until(self, job_id: str, what: str, test: Any) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            job = await self.job(job_id)
            return job if test(job) else None

        found: dict[str, Any] = await wait_for(reached, timeout=15, what=f"{job_id} {what}")
        return found


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    settings = await migrated(
        embedded_settings(
            tmp_path,
            modules=[],
            scheduler={"embedded": False},
            limits={"contention_retry_s": 0.3},
        )
    )
    rail = JobRail(settings)
    app = FastAPI(lifespan=rail.lifespan)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host")
    host = Host(rail, http)

    @rail.job("reports.render", payload=Render, lock=Lock(key="report:{tenant_id}:{report_id}"))
    async def render(payload: Render, ctx: JobContext) -> dict[str, str]:
        await host.release.wait()
        return {"report": payload.report_id}

    @rail.job(
        "reports.impatient",
        payload=Render,
        lock=Lock(key="report:{tenant_id}:{report_id}"),
        max_wait_s=1,
    )
    async def impatient(payload: Render, ctx: JobContext) -> None:
        return None

    host.render, host.impatient = render, impatient  # type: ignore[attr-defined]
    app.include_router(rail.router(tenant=tenant))
    async with rail.lifespan(app), http:
        yield host
        host.release.set()


async def test_a_job_the_lock_defers_names_the_lock_its_key_and_when_it_tries_again(
    host: Host,
) -> None:
    render: Any = host.render  # type: ignore[attr-defined]
    holder = await render.enqueue(Render(report_id="q3"), tenant_id="acme")
    await host.until(str(holder.job.id), "to run", lambda j: j["status"] == "running")
    queued = await render.enqueue(Render(report_id="q3"), tenant_id="acme")

    waiting = await host.until(str(queued.job.id), "to wait", lambda j: j["waiting"] is not None)

    assert waiting["status"] == "pending"
    assert waiting["attempts"] == 0
    assert waiting["waiting"]["reason"] == "lock"
    assert waiting["waiting"]["on"] == [
        {
            "kind": "lock",
            "name": "lock",
            "key": "report:acme:q3",
            "held_by_job_id": str(holder.job.id),  # from the lock's denial
        }
    ]
    assert waiting["waiting"]["position"] is None  # no line: fair dispatch is off
    until = datetime.fromisoformat(waiting["waiting"]["until"])
    since = datetime.fromisoformat(waiting["waiting"]["since"])
    assert since <= until
    assert since >= datetime.fromisoformat(waiting["created_at"])

    host.release.set()
    done = await host.until(str(queued.job.id), "to succeed", lambda j: j["status"] == "succeeded")
    assert done["waiting"] is None
    assert done["attempts"] == 1


async def test_a_job_that_waits_longer_than_its_type_allows_fails_saying_why(host: Host) -> None:
    render: Any = host.render  # type: ignore[attr-defined]
    impatient: Any = host.impatient  # type: ignore[attr-defined]
    holder = await render.enqueue(Render(report_id="q4"), tenant_id="acme")
    await host.until(str(holder.job.id), "to run", lambda j: j["status"] == "running")

    queued = await impatient.enqueue(Render(report_id="q4"), tenant_id="acme")
    failed = await host.until(str(queued.job.id), "to fail", lambda j: j["status"] == "failed")

    assert failed["last_error"].startswith("waited longer than its type allows (1 s")
    assert "lock" in failed["last_error"]
    assert failed["waiting"] is None
