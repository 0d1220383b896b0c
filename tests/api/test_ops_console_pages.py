"""The console's workers, schedules and limits pages, in embedded mode (SQLite, the
in-process worker that beats like a worker process, its scheduler, the in-memory limits),
through the ASGI app as a signed-in browser: what each page shows against what the
database and the limits backend hold, the limit reset asked first and refused without its
CSRF token, and bad input answered with a 4xx page that says why.
(tests/e2e/test_ops_console_workers_browser.py: the workers page in Chromium, on the
real services.)"""

import html
import logging
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from jobrail.jobs.registry import JobRegistry
from jobrail.limits.model import Acquire, LimitsBackend
from jobrail.runtime.app import runtime_of
from jobrail.store.tables import jobs, workers
from tests.support.console import Console, console
from tests.support.ops_pages import fields, has_table, rows, texts
from tests.support.services import wait_for

DEMO = {"Authorization": "Bearer demo-key"}
SYNC = "sync.account"


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Console]:
    # Quick beats, and prune-workers firing every second (its cron overridden as an
    # operator would): the pages have something that changes to show.
    every_second = {"schedules": {"prune-workers": {"cron": "* * * * * *"}}}
    async with console(
        tmp_path, worker={"beat_interval_s": 0.2, "shutdown_grace_s": 0.5}, scheduler=every_second
    ) as running:
        yield running


async def _container_get(ops: Console, kind: type[Any]) -> Any:
    return await runtime_of(ops.app).container.get(kind)


async def test_the_workers_page_shows_the_runtime_and_the_job_it_runs(ops: Console) -> None:
    response = await ops.browser.post(
        "/demo/echo", json={"message": "m", "sleep_ms": 60_000}, headers=DEMO
    )
    job_id = response.json()["job_id"]

    async def running_it() -> Any:
        page = await ops.page("/ops/workers")
        if not has_table(page, "worker-list"):  # no beat written yet
            return None
        found = rows(page, "worker-list")
        return found if found and job_id in found[0]["running"].text else None

    [row] = await wait_for(running_it, timeout=20, what="the runtime to show the job")
    live = await ops.browser.get("/ops/workers", headers={"HX-Request": "true"})
    async with ops.engine.connect() as conn:
        [stored] = (await conn.execute(select(workers))).mappings().all()

    assert row["state"].text.strip() == "alive"
    assert row["pid"].text == str(os.getpid())
    assert row["host"].text == stored["host"]
    assert row["concurrency"].text == str(stored["concurrency"])
    assert row["queues"].text == ", ".join(stored["queues"])
    # The sleeping job, and maybe a prune-workers job fired this second.
    assert f"/ops/jobs/{job_id}" in row["running"].links
    assert job_id in stored["running"]
    assert live.status_code == 200
    assert live.text.startswith("<div id=live")  # the refreshed part alone
    assert "<html" not in live.text
    assert 'hx-trigger="every 5s"' in live.text


async def test_the_schedules_page_shows_next_and_last_fire_and_the_leader(ops: Console) -> None:
    async def fired() -> Any:
        page = await ops.page("/ops/schedules")
        shown = {r["schedule"].text: r for r in rows(page, "schedule-list")}
        prune = shown["prune-workers"]
        return (page, shown) if prune["last job"].links else None

    page, shown = await wait_for(fired, timeout=20, what="prune-workers to fire")
    prune = shown["prune-workers"]
    job_id = prune["last job"].links[0].rsplit("/", 1)[1]
    async with ops.engine.connect() as conn:
        job = (
            (await conn.execute(select(jobs).where(jobs.c.id == uuid.UUID(job_id))))
            .mappings()
            .one()
        )

    assert (job["tenant_id"], job["entity_id"], job["type"]) == (
        "_system",
        "prune-workers",
        prune["job type"].text,
    )
    period = prune["last fire"].text.replace(" ", "T") + "Z"
    assert job["idempotency_key"] == f"prune-workers:{period}"
    assert prune["cron"].text == "* * * * * *"
    assert prune["next fire"].text > prune["last fire"].text
    # The embedded runtime leads: its holder names this host and process.
    assert f":{os.getpid()}:" in page.split("id=leader>", 1)[1].split("</p>", 1)[0]
    # The others never fired in this test; their next fire is still shown.
    prune_jobs = shown["prune-jobs"]
    assert prune_jobs["status"].text == "never fired"
    assert prune_jobs["next fire"].text


async def test_the_limits_page_lists_the_declared_limits(ops: Console) -> None:
    page = await ops.page("/ops/limits")

    declared = {(r["job type"], r["limit"]): r for r in texts(page, "declared-limits")}
    assert declared[(SYNC, "vendor")]["kind"] == "token bucket"
    assert declared[(SYNC, "vendor")]["key template"] == "vendor:{tenant_id}"
    assert declared[(SYNC, "lock")]["kind"] == "lock"
    assert declared[(SYNC, "lock")]["key template"] == "account:{tenant_id}:{account_id}"
    assert "ttl_s=" in declared[(SYNC, "lock")]["terms"]
    assert "capacity=" in declared[(SYNC, "vendor")]["terms"]


async def test_a_held_lock_shows_its_job_and_a_confirmed_reset_frees_it(
    ops: Console, caplog: pytest.LogCaptureFixture
) -> None:
    registry: JobRegistry = await _container_get(ops, JobRegistry)
    backend: LimitsBackend = await _container_get(ops, LimitsBackend)
    spec = registry.spec(SYNC)
    assert spec is not None
    assert spec.limits.lock is not None
    key = "account:acme:42"
    item = Acquire(spec.limits.lock, key)
    job_id = str(uuid.uuid4())
    admitted = await backend.admit([item], f"{job_id}/0a1b2c")
    assert admitted.allowed
    chosen = {"job_type": SYNC, "limit": "lock", "key": key}

    page = await ops.page("/ops/limits", **chosen)
    state = {name: cell.text for name, cell in fields(page, "limit-state").items()}
    [holder] = rows(page, "holders")
    asked = await ops.act("/ops/limits/reset", confirm=False, **chosen)
    refused = await ops.act("/ops/limits/reset", csrf=False, **chosen)
    still_held = await backend.holders(item)
    with caplog.at_level(logging.INFO, logger="jobrail.ops"):
        done = await ops.act("/ops/limits/reset", **chosen)
    after = await ops.page(done.headers["location"])

    assert state["would admit now"] == "no"
    assert holder["holder"].text == f"{job_id}/0a1b2c"
    assert holder["job"].links == [f"/ops/jobs/{job_id}"]
    assert asked.status_code == 200
    assert "id=question" in asked.text
    assert "name=confirm value=yes" in asked.text
    assert refused.status_code == 403
    assert [h["holder"] for h in still_held] == [f"{job_id}/0a1b2c"]
    assert done.status_code == 303
    assert await backend.holders(item) == []
    assert "id=note" in after
    assert "id=no-holders" in after
    assert fields(after, "limit-state")["would admit now"].text == "yes"
    [audit] = [r for r in caplog.records if r.name == "jobrail.ops" and "reset" in r.message]
    assert f"reset limit lock of {SYNC} for key {key}" in audit.getMessage()
    assert "Bearer" not in audit.getMessage()


async def test_a_rate_limits_peek_shows_what_is_left(ops: Console) -> None:
    registry: JobRegistry = await _container_get(ops, JobRegistry)
    backend: LimitsBackend = await _container_get(ops, LimitsBackend)
    spec = registry.spec(SYNC)
    assert spec is not None
    vendor = next(limit for limit in spec.limits.all() if limit.name == "vendor")
    before = await ops.page("/ops/limits", job_type=SYNC, limit="vendor", key="vendor:acme")
    await backend.admit([Acquire(vendor, "vendor:acme")], "someone")

    after = await ops.page("/ops/limits", job_type=SYNC, limit="vendor", key="vendor:acme")
    # The key's state refreshes itself: the fragment at the page's own hx-get address.
    [refresh_at] = re.findall(r'hx-get="([^"]+)"', before)
    live = await ops.browser.get(html.unescape(refresh_at), headers={"HX-Request": "true"})

    left_before = float(fields(before, "limit-state")["remaining"].text)
    left_after = float(fields(after, "limit-state")["remaining"].text)
    assert left_after < left_before
    assert "id=no-holders" in after
    assert live.text.startswith("<div id=live")
    assert "<html" not in live.text
    refreshed = fields(live.text, "limit-state")
    assert refreshed["key"].text == "vendor:acme"
    # read after `after`: the bucket may have refilled a little since, never past full
    assert left_after <= float(refreshed["remaining"].text) <= left_before
    # without a key chosen, nothing refreshes
    assert "hx-get" not in await ops.page("/ops/limits")


@pytest.mark.parametrize(
    ("params", "status", "reason"),
    [
        ({"job_type": "no.such", "limit": "lock", "key": "k"}, 404, "job type &#39;no.such&#39;"),
        ({"job_type": SYNC, "limit": "nope", "key": "k"}, 404, "it has: lock, vendor"),
        ({"job_type": SYNC, "limit": "lock"}, 400, "give a job type, one of its limits and a key"),
        ({"job_type": SYNC, "limit": "lock", "key": "k" * 256}, 400, "a key 255"),
    ],
)
async def test_bad_limit_input_is_a_4xx_page_that_says_why(
    ops: Console, params: dict[str, str], status: int, reason: str
) -> None:
    looked = await ops.browser.get("/ops/limits", params=params)
    reset = await ops.act("/ops/limits/reset", **params)

    assert looked.status_code == status
    assert reason in looked.text
    assert "id=problem" in looked.text
    assert "declared-limits" in looked.text  # the page itself, to try again
    assert reset.status_code == status
    assert reason in reset.text


async def test_an_oversized_reset_form_is_refused(ops: Console) -> None:
    response = await ops.act("/ops/limits/reset", job_type=SYNC, limit="lock", key="k" * 2000)

    assert response.status_code == 403  # more than a form of the console holds
    assert "did not come from this page" in response.text


@pytest.mark.parametrize("path", ["/ops/workers", "/ops/schedules", "/ops/limits"])
async def test_the_pages_want_an_admin(ops: Console, path: str) -> None:
    ops.browser.cookies.clear()

    response = await ops.browser.get(path)
    reset = await ops.browser.post(
        "/ops/limits/reset", data={"job_type": SYNC, "limit": "lock", "key": "k"}
    )

    assert response.status_code == 401
    assert "name=api_key" in response.text
    assert reset.status_code == 401


async def test_the_nav_links_to_the_new_pages(ops: Console) -> None:
    page = await ops.page("/ops/workers")

    for name in ("workers", "schedules", "limits"):
        assert f'href="/ops/{name}" id=nav-{name}' in page
    assert "id=nav-workers class=here" in page
