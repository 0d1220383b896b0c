"""The event feed and webhooks on the ops page, in embedded mode (SQLite, the in-process
worker and webhook relay): a job's page lists its events as its JSON events page does,
its progress folded between its other events, and the overview counts each tenant's
webhooks and deliveries of the day and links the failed ones to their jobs, never
showing a secret or more of a URL than its origin.
(tests/integration/test_ops_events_pg.py: the same on Postgres.)"""

import base64
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.workflows import ChainCommand, FlowJob
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import runtime_of
from jobrail.store.tables import jobs
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.feed import SSE, sse_events
from tests.support.fixtures import ApiClient
from tests.support.job_story import REPORTS, check_both_views_fold_its_progress, run_with_progress
from tests.support.ops_pages import rows, texts
from tests.support.servers import served
from tests.support.services import wait_for

SECRET = "whsec_" + base64.b64encode(b"s3cr3t-bytes-for-the-test!").decode()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    from jobrail.runtime.app import create_app

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


@pytest.fixture
async def receiver() -> AsyncIterator[str]:
    """A receiver whose /ok/... paths take deliveries and whose /fail/... refuse them."""
    app = FastAPI()

    @app.post("/{outcome}/{token}")
    async def hook(outcome: str, token: str, request: Request) -> Response:
        await request.body()
        return Response(status_code=204 if outcome == "ok" else 500)

    async with served(app) as url:
        yield url


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


async def test_a_jobs_page_and_its_events_page_fold_its_progress_alike(api: ApiClient) -> None:
    job_id, chain_id = await _blocked_job(api)
    engine = await runtime_of(api.app).container.get(AsyncEngine)
    await run_with_progress(engine, job_id)

    items = await check_both_views_fold_its_progress(api, job_id)

    # The stream, and the tenant's feed, still have every event.
    every = 1 + 1 + REPORTS + 1
    async with (
        served(api.app) as url,
        httpx.AsyncClient(base_url=url, headers=api.headers) as http,
        http.stream("GET", f"/jobs/{job_id}/events", headers=SSE, timeout=20) as stream,
    ):
        streamed = [e async for e in sse_events(stream)]  # ends: the job has ended
    assert len(streamed) == every
    assert streamed[-2]["id"] == items[2]["id"]  # the folded line is the newest report
    assert all("folded" not in e for e in streamed)
    feed = (await api.get("/events", params={"limit": 500})).json()["items"]
    assert [e["id"] for e in feed if e["job_id"] == str(job_id)] == [e["id"] for e in streamed]
    await api.post(f"/chains/{chain_id}/cancel")


async def test_a_long_story_shows_its_first_hundred_lines_on_both(api: ApiClient) -> None:
    job_id, chain_id = await _blocked_job(api)
    engine = await runtime_of(api.app).container.get(AsyncEngine)
    async with engine.begin() as conn:
        for n in range(120):  # deferred 120 times, reporting progress twice after each
            until = f"2026-12-02T00:{n // 60:02}:{n % 60:02}+00:00"
            lock = [{"kind": "lock", "name": "l", "key": "k"}]
            at = "2026-12-02T00:00:00+00:00"
            waiting = {"on": lock, "until": until, "since": at}
            await conn.execute(update(jobs).where(jobs.c.id == job_id).values(waiting=waiting))
            for current in (2 * n, 2 * n + 1):
                progress = {"current": current, "total": None, "message": None, "updated_at": at}
                await conn.execute(
                    update(jobs).where(jobs.c.id == job_id).values(progress=progress)
                )

    page = await _page(api, f"/ops/jobs/{job_id}")
    feed = (await api.get(f"/jobs/{job_id}/events")).json()

    events = texts(page, "events")
    assert len(events) == 100
    assert [e["event"] for e in events[:3]] == ["enqueued", "deferred", "progress"]
    assert re.findall(r'data-event="([^"]+)"', page) == [e["id"] for e in feed["items"]]
    assert "The first 100 lines." in page
    after = {"after": feed["last_event_id"], "limit": 500}
    rest = (await api.get(f"/jobs/{job_id}/events", params=after)).json()
    lines = feed["items"] + rest["items"]
    assert len(lines) == 1 + 2 * 120
    assert {e["folded"] for e in lines if e["event"] == "progress"} == {2}
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
    assert "The first" not in page
    await api.post(f"/chains/{chain_id}/cancel")


async def _webhook(api: ApiClient, url: str, tenant: dict[str, str] | None = None) -> Any:
    created = await api.post("/webhooks", json={"url": url, "secret": SECRET}, headers=tenant)
    assert created.status_code == 201, created.text
    return created.json()


async def test_the_overview_counts_webhooks_and_links_failed_deliveries(
    api: ApiClient, receiver: str
) -> None:
    acme = await api.auth("acme")
    await _webhook(api, f"{receiver}/fail/tok_demo?token=abc123")
    gone = await _webhook(api, f"{receiver}/ok/tok_gone")
    assert (await api.delete(f"/webhooks/{gone['id']}")).status_code == 204
    await _webhook(api, f"{receiver}/ok/tok_acme", acme)
    await _webhook(api, f"{receiver}/ok/tok_acme2", acme)
    await api.echo()
    await api.echo(headers=acme)

    async def delivered() -> list[dict[str, Any]] | None:
        items = (await api.get("/jobs", params={"type": "webhooks.deliver"})).json()["items"]
        theirs = (await api.get("/jobs", params={"type": "webhooks.deliver"}, headers=acme)).json()
        done = [j for j in items + theirs["items"] if j["status"] in ("succeeded", "failed")]
        return done if len(done) == 3 else None

    deliveries = await wait_for(delivered, timeout=30, what="the three deliveries to end")
    [failed] = [d for d in deliveries if d["status"] == "failed"]

    page = await _page(api, "/ops")

    assert texts(page, "webhooks") == [
        {
            "tenant": "demo",
            "webhooks": "1",
            "succeeded": "0",
            "failed": "1",
            "pending or retrying": "0",
        },
        {
            "tenant": "acme",
            "webhooks": "2",
            "succeeded": "2",
            "failed": "0",
            "pending or retrying": "0",
        },
    ]
    [row] = rows(page, "webhook-failures")
    assert row["delivery"].links == [f"/ops/jobs/{failed['id']}"]
    assert row["tenant"].text == "demo"
    assert row["receiver"].text == receiver  # http://127.0.0.1:port, nothing after it
    assert row["attempts"].text == "8"
    assert "answered 500" in row["error"].text
    for hidden in (SECRET, "tok_", "token=", "/fail", "/ok"):
        assert hidden not in page
    # The failed delivery's page tells its story, and links nowhere near the secret.
    delivery = await _page(api, f"/ops/jobs/{failed['id']}")
    names = [e["event"] for e in texts(delivery, "events")]
    assert names[:2] == ["enqueued", "started"]
    assert names[-1] == "failed"
    assert names.count("retrying") == 7
    assert SECRET not in delivery
    # Signed out, the page shows nothing of it.
    api.headers.pop("Authorization")
    anonymous = await api.get("/ops")
    assert anonymous.status_code == 401
    assert "Webhooks" not in anonymous.text
    assert "acme" not in anonymous.text


async def test_the_webhooks_section_shows_the_tenants_with_most_failures_first_capped(
    api: ApiClient,
) -> None:
    for n in range(22):
        tenant = await api.auth(f"t{n:02}")
        await _webhook(api, f"https://hooks.example.com/t{n}/secret-path", tenant)

    page = await _page(api, "/ops")

    listed = texts(page, "webhooks")
    assert [row["tenant"] for row in listed] == [f"t{n:02}" for n in range(20)]
    assert {row["webhooks"] for row in listed} == {"1"}
    assert "The 20 of 22 tenants with the most failed deliveries." in page
    assert rows(page, "webhook-failures") == []
    assert "secret-path" not in page
