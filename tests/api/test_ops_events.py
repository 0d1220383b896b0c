"""The event feed on the ops page, in embedded mode (SQLite, the in-process worker): a
job's page lists its newest events as the feed has them, escaped."""

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.api.app import runtime_of
from jobrail.jobs.use_cases.flows import ChainCommand, FlowJob, FlowService
from jobrail.kernel.ids import TenantId
from jobrail.persistence.tables import jobs
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient
from tests.support.ops_pages import texts


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    from jobrail.api.app import create_app

    settings = embedded_settings(
        tmp_path,
        events={"poll_interval_ms": 50, "webhook_private_addresses": True},
        retry={"base_s": 0.02, "cap_s": 0.2, "jitter": "none"},
    )
    app = create_app(await migrated(settings), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client.sign_in_with("demo", "demo-key")


async def _page(api: ApiClient, path: str) -> str:
    response = await api.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    return response.text


async def _blocked_job(api: ApiClient) -> tuple[uuid.UUID, uuid.UUID]:
    """A job nothing runs (a chain's second step, while the first sleeps), and its chain."""
    flows = await runtime_of(api.app).container.get(FlowService)
    started = await flows.chain(
        ChainCommand(
            tenant_id=TenantId("demo"),
            steps=[FlowJob("demo.echo", {"message": "m", "sleep_ms": 60_000})] * 2,
        )
    )
    return started.members[1].id, started.flow.id


async def test_a_jobs_page_lists_its_events_as_the_feed_has_them(api: ApiClient) -> None:
    job_id = await api.echo(fail_times=1)
    await api.wait_status(job_id, "succeeded")
    feed = (await api.get(f"/jobs/{job_id}/events")).json()["items"]

    events = texts(await _page(api, f"/ops/jobs/{job_id}"), "events")

    assert [e["event"] for e in events] == [
        "enqueued",
        "started",
        "retrying",
        "started",
        "succeeded",
    ]
    assert [e["event"] for e in events] == [e["event"] for e in feed]
    assert [e["status"] for e in events] == [e["status"] for e in feed]
    assert [e["attempts"] for e in events] == [str(e["attempts"]) for e in feed]
    assert [e["at"] for e in events] == [e["at"][:19].replace("T", " ") for e in feed]
    retrying = events[2]["details"]
    assert retrying.startswith(f"next attempt {feed[2]['run_after'][:19].replace('T', ' ')}: ")
    assert "asked to fail" in retrying


async def test_a_jobs_page_shows_its_newest_fifty_events_escaped(api: ApiClient) -> None:
    job_id, chain_id = await _blocked_job(api)
    engine = await runtime_of(api.app).container.get(AsyncEngine)
    async with engine.begin() as conn:
        for n in range(56):
            progress = {
                "current": n,
                "total": 60,
                "message": f"<i>row {n}</i>",
                "updated_at": "2026-12-02T00:00:00+00:00",
            }
            await conn.execute(update(jobs).where(jobs.c.id == job_id).values(progress=progress))
        await conn.execute(
            update(jobs)
            .where(jobs.c.id == job_id)
            .values(status="failed", last_error="<b>boom</b>")
        )

    page = await _page(api, f"/ops/jobs/{job_id}")

    events = texts(page, "events")
    # enqueued, 56 progress reports, failed: the newest 50, oldest first.
    assert len(events) == 50
    assert [e["event"] for e in events] == ["progress"] * 49 + ["failed"]
    assert events[0]["details"] == "7 / 60 <i>row 7</i>"
    assert events[-2]["details"] == "55 / 60 <i>row 55</i>"
    assert events[-1]["details"] == "<b>boom</b>"
    assert "The newest 50." in page
    assert "<i>" not in page
    assert "<b>boom" not in page
    feed = (await api.get(f"/jobs/{job_id}/events")).json()["items"]
    assert len(feed) == 58  # the older ones are still kept
    await api.post(f"/chains/{chain_id}/cancel")


async def test_a_deferral_says_what_the_job_waits_for(api: ApiClient) -> None:
    job_id, chain_id = await _blocked_job(api)
    engine = await runtime_of(api.app).container.get(AsyncEngine)
    waiting = {
        "on": [{"kind": "rate_limit", "name": "<vendor>", "key": "vendor:demo"}],
        "until": "2026-12-02T00:01:00+00:00",
        "since": "2026-12-02T00:00:00+00:00",
    }
    async with engine.begin() as conn:
        await conn.execute(update(jobs).where(jobs.c.id == job_id).values(waiting=waiting))

    page = await _page(api, f"/ops/jobs/{job_id}")

    deferred = texts(page, "events")[-1]
    del deferred["at"]
    assert deferred == {
        "event": "deferred",
        "status": "blocked",
        "attempts": "0",
        "details": "waits for rate_limit <vendor> (vendor:demo) until 2026-12-02 00:01:00",
    }
    assert "&lt;vendor&gt;" in page
    assert "The newest" not in page
    await api.post(f"/chains/{chain_id}/cancel")
