"""A deadline passing while a job waits behind a lock or a rate limit ends it expired,
never run, with its event; a unique key returns the active job and is free again once
that job has ended; debounced enqueues collapse into one run with the last payload
(embedded mode, through a host's JobRail)."""

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from jobrail import JobContext, JobRail, Lock, TokenBucket
from jobrail.jobs.intake import Debounce, EnqueueJobCommand, EnqueueResult
from jobrail.kernel.ids import TenantId
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
        self.ran: list[str] = []

    async def enqueue(self, job_type: str, report_id: str, **options: Any) -> EnqueueResult:
        return await self.rail.enqueue(
            EnqueueJobCommand(
                tenant_id=TenantId("acme"),
                type=job_type,
                payload={"report_id": report_id},
                **options,
            )
        )

    async def job(self, job_id: object) -> dict[str, Any]:
        response = await self.http.get(f"/jobs/{job_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def until(self, job_id: object, status: str) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            job = await self.job(job_id)
            return job if job["status"] == status else None

        found: dict[str, Any] = await wait_for(reached, timeout=30, what=f"{job_id} {status}")
        return found


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    settings = await migrated(
        embedded_settings(
            tmp_path, modules=[], scheduler={"embedded": False}, limits={"contention_retry_s": 0.3}
        )
    )
    rail = JobRail(settings)
    app = FastAPI(lifespan=rail.lifespan)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host")
    host = Host(rail, http)

    @rail.job("reports.render", payload=Render, lock=Lock(key="report:{tenant_id}:{report_id}"))
    async def render(payload: Render, ctx: JobContext) -> None:
        host.ran.append(str(ctx.job_id))
        await host.release.wait()

    @rail.job(
        "reports.vendor",
        payload=Render,
        limits=[TokenBucket("vendor", key="vendor:{tenant_id}", capacity=1, per_second=1 / 600)],
    )
    async def vendor(payload: Render, ctx: JobContext) -> None:
        host.ran.append(str(ctx.job_id))

    @rail.job("reports.digest", payload=Render)
    async def digest(payload: Render, ctx: JobContext) -> dict[str, str]:
        host.ran.append(str(ctx.job_id))
        return {"report": payload.report_id}

    app.include_router(rail.router(tenant=tenant))
    async with rail.lifespan(app), http:
        yield host
        host.release.set()


def soon(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_a_deadline_passing_behind_a_lock_expires_the_job_unrun(host: Host) -> None:
    holder = await host.enqueue("reports.render", "q3")
    await host.until(holder.job.id, "running")
    waiting = await host.enqueue("reports.render", "q3", deadline=soon(1.5))

    expired = await host.until(waiting.job.id, "expired")
    host.release.set()
    await host.until(holder.job.id, "succeeded")

    assert expired["attempts"] == 0
    assert expired["started_at"] is None
    assert expired["deadline"] is not None
    assert expired["last_error"] == "not started by its deadline"
    assert str(waiting.job.id) not in host.ran
    events = (await host.http.get(f"/jobs/{waiting.job.id}/events")).json()["items"]
    assert [e["event"] for e in events if e["event"] != "deferred"] == ["enqueued", "expired"]


async def test_a_deadline_passing_behind_a_rate_limit_expires_the_job_unrun(host: Host) -> None:
    first = await host.enqueue("reports.vendor", "a")  # takes the bucket's one token
    await host.until(first.job.id, "succeeded")
    # The next token comes in ten minutes: its message is parked that long.
    waiting = await host.enqueue("reports.vendor", "b", deadline=soon(1))

    expired = await host.until(waiting.job.id, "expired")

    assert expired["attempts"] == 0
    assert host.ran == [str(first.job.id)]


async def test_a_unique_key_returns_the_active_job_and_is_free_once_it_ends(host: Host) -> None:
    first = await host.enqueue("reports.render", "u1", unique_key="render:u1")
    await host.until(first.job.id, "running")
    again = await host.enqueue("reports.render", "other", unique_key="render:u1")
    host.release.set()
    await host.until(first.job.id, "succeeded")

    after = await host.enqueue("reports.render", "u1", unique_key="render:u1")

    assert again.created is False
    assert again.job.id == first.job.id
    assert after.created is True
    assert after.job.id != first.job.id
    assert (await host.until(after.job.id, "succeeded"))["unique_key"] == "render:u1"
    assert host.ran == [str(first.job.id), str(after.job.id)]


async def test_a_unique_key_and_an_idempotency_key_each_keep_their_meaning(host: Host) -> None:
    host.release.set()
    first = await host.enqueue("reports.render", "k", idempotency_key="req-1", unique_key="u")
    await host.until(first.job.id, "succeeded")

    repeated = await host.enqueue("reports.render", "k", idempotency_key="req-1", unique_key="u")
    fresh = await host.enqueue("reports.render", "k", idempotency_key="req-2", unique_key="u")

    assert repeated.job.id == first.job.id  # the same request, even after the job ended
    assert repeated.created is False
    assert fresh.created is True  # the key is free: its job has ended


async def test_debounced_enqueues_run_once_with_the_last_payload_then_open_a_new_window(
    host: Host,
) -> None:
    window = Debounce(key="digest:acme", window_s=1.0)
    results = [await host.enqueue("reports.digest", f"v{n}", debounce=window) for n in range(4)]
    first = results[0].job

    done = await host.until(first.id, "succeeded")
    after = await host.enqueue("reports.digest", "v9", debounce=window)

    assert [r.created for r in results] == [True, False, False, False]
    assert {r.job.id for r in results} == {first.id}
    assert results[-1].job.payload == {"report_id": "v3"}
    assert done["result"] == {"report": "v3"}
    assert done["attempts"] == 1
    assert host.ran == [str(first.id)]
    assert after.created is True
    assert (await host.until(after.job.id, "succeeded"))["result"] == {"report": "v9"}


async def test_debounce_refuses_a_clashing_option_and_a_bad_window(host: Host) -> None:
    from jobrail.kernel.errors import InvalidInputError

    window = Debounce(key="d", window_s=1.0)
    for clash in ({"unique_key": "u"}, {"idempotency_key": "i"}, {"run_after": soon(5)}):
        with pytest.raises(InvalidInputError, match="debounce cannot be combined"):
            await host.enqueue("reports.digest", "x", debounce=window, **clash)
    for bad in (0, -1, 10**9):
        with pytest.raises(InvalidInputError, match="debounce window"):
            Debounce(key="d", window_s=bad)
