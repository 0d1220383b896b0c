"""A job its lock defers says, on GET /jobs/{id}, what it waits for, which job holds the
lock and when it tries again, and stops saying it once it runs; a job type may cap the
wait; a job due later, in its debounce window or turned away by a rate limit says so
(embedded mode, fair dispatch off: no place in line)."""

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

    @rail.job(
        "reports.vendor",
        payload=Render,
        limits=[TokenBucket("vendor", key="vendor:{tenant_id}", capacity=1, per_second=1 / 600)],
    )
    async def vendor(payload: Render, ctx: JobContext) -> None:
        return None

    host.render, host.impatient = render, impatient  # type: ignore[attr-defined]
    host.vendor = vendor  # type: ignore[attr-defined]
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


def _parsed(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_a_job_due_later_or_in_its_debounce_window_says_until_when(host: Host) -> None:
    render: Any = host.render  # type: ignore[attr-defined]
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    later = await render.enqueue(Render(report_id="later"), tenant_id="acme", run_at=at)
    debounced = await render.enqueue(
        Render(report_id="digest"), tenant_id="acme", debounce_key="d", debounce_s=600
    )

    run_at, window = await host.job(str(later.job.id)), await host.job(str(debounced.job.id))

    assert run_at["waiting"]["reason"] == "run_at"
    assert _parsed(run_at["waiting"]["until"]) == at
    assert run_at["waiting"]["since"] == run_at["created_at"]
    assert window["waiting"]["reason"] == "debounce"
    assert window["waiting"]["until"] == window["run_after"]  # when the window closes
    assert (run_at["waiting"]["position"], window["waiting"]["eta"]) == (None, None)


async def test_a_job_its_rate_limit_turns_away_says_so_and_when_it_tries_again(
    host: Host,
) -> None:
    vendor: Any = host.vendor  # type: ignore[attr-defined]
    # One token in ten minutes for two jobs: the one the bucket sees second is turned
    # away before its claim and waits for the next token. (The other may be sent round
    # too, after its claim, should it start later than its token allows on a busy
    # machine: it is then `retrying`, its attempt given back.)
    jobs = [await vendor.enqueue(Render(report_id=n), tenant_id="acme") for n in "ab"]

    async def one_turned_away() -> dict[str, Any] | None:
        for job in jobs:
            found = await host.job(str(job.job.id))
            if found["status"] == "pending" and found["waiting"] is not None:
                return found
        return None

    waiting = await wait_for(one_turned_away, timeout=15, what="a job to wait for a token")

    assert waiting["status"] == "pending"
    assert waiting["waiting"]["reason"] == "rate_limit"
    assert waiting["waiting"]["on"] == [
        {"kind": "rate_limit", "name": "vendor", "key": "vendor:acme", "held_by_job_id": None}
    ]
    # Its reserved token comes in about ten minutes (one every 600 s; twenty, if the
    # other job's token went to waste).
    wait = _parsed(waiting["waiting"]["until"]) - _parsed(waiting["waiting"]["since"])
    assert timedelta(minutes=9) < wait <= timedelta(minutes=20, seconds=1)
