"""The console's bulk cancel and bulk redrive by filter, a running job's cancel, and
each failed attempt's traceback on a job's page, in embedded mode (SQLite, the
in-process worker) through the ASGI app as a signed-in browser. Every action asks
first (saying how many jobs match), is refused without its CSRF token, turns bad
filters away with a 400 page, stays within its batch bound, and is checked in the
database after. (tests/e2e/test_ops_console_bulk_browser.py: the same in Chromium on
the real services.)"""

import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

import jobrail.jobs.cancel
import jobrail.ops.bulk
import jobrail.ops.console_bulk
from jobrail.store.tables import job_attempt_failures, job_events, jobs
from jobrail.worker.failures import MAX_TRACEBACK_CHARS, formatted
from tests.support.console import Console, console
from tests.support.ops_pages import texts
from tests.support.services import wait_for

DEMO = {"Authorization": "Bearer demo-key"}
T0 = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Console]:
    async with console(tmp_path) as running:
        yield running


async def _statuses(engine: AsyncEngine, ids: list[uuid.UUID]) -> list[str]:
    async with engine.connect() as conn:
        found = dict((await conn.execute(select(jobs.c.id, jobs.c.status))).all())
    return [found[job_id] for job_id in ids]


async def _event_count(engine: AsyncEngine, name: str) -> int:
    query = select(func.count()).where(job_events.c.name == name)
    async with engine.connect() as conn:
        return int(await conn.scalar(query) or 0)


async def _echo(ops: Console, **payload: Any) -> str:
    payload.setdefault("message", "hello")
    response = await ops.browser.post("/demo/echo", json=payload, headers=DEMO)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def _until(ops: Console, job_id: str, *statuses: str) -> None:
    async def reached() -> bool:
        [status] = await _statuses(ops.engine, [uuid.UUID(job_id)])
        return status in statuses

    await wait_for(reached, timeout=30, what=f"job {job_id} to be {'/'.join(statuses)}")


def _failed(**row: Any) -> dict[str, Any]:
    return {"status": "failed", "attempts": 3, "last_error": "boom", "finished_at": T0, **row}


async def test_the_job_list_has_the_bulk_form_filled_from_its_filters(ops: Console) -> None:
    page = await ops.page("/ops/jobs", type="demo.echo", tenant="acme", status="pending")

    form = page.split("id=bulk-form class=filters>", 1)[1].split("</form>", 1)[0]
    assert 'id=bulk-type value="demo.echo"' in form
    assert 'id=bulk-tenant value="acme"' in form
    assert '<option value="pending" selected>' in form
    assert f'name=csrf_token value="{ops.csrf}"' in form
    assert 'formaction="/ops/bulk/redrive"' in form


async def test_a_bulk_cancel_asks_first_with_the_count_and_cancels_only_what_matches(
    ops: Console, caplog: pytest.LogCaptureFixture
) -> None:
    taken = await ops.add_jobs(*({"status": "pending", "tenant_id": "acme"} for _ in range(3)))
    kept = await ops.add_jobs(
        {"status": "pending", "tenant_id": "other"},
        {"status": "pending", "tenant_id": "acme", "type": "sync.account"},
        {"status": "succeeded", "tenant_id": "acme"},
    )
    filter_ = {"type": "demo.echo", "tenant": "acme"}

    asked = await ops.act("/ops/bulk/cancel", confirm=False, **filter_)
    without_token = await ops.act("/ops/bulk/cancel", csrf=False, **filter_)
    cross_site = await ops.browser.post(
        "/ops/bulk/cancel",
        data={**filter_, "csrf_token": ops.csrf, "confirm": "yes"},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert asked.status_code == 200
    assert "Cancel 3 jobs (status blocked/pending/retrying/running, type demo.echo, " in asked.text
    assert 'name="tenant" value="acme"' in asked.text
    assert "name=confirm value=yes" in asked.text
    assert without_token.status_code == cross_site.status_code == 403
    assert await _statuses(ops.engine, taken) == ["pending"] * 3

    with caplog.at_level(logging.INFO, logger="jobrail.ops"):
        done = await ops.act("/ops/bulk/cancel", **filter_)

    assert done.status_code == 200
    assert "3 cancelled, 0 running asked to stop." in done.text
    assert "run it again" not in done.text
    assert await _statuses(ops.engine, taken) == ["cancelled"] * 3
    assert await _statuses(ops.engine, kept) == ["pending", "pending", "succeeded"]
    assert await _event_count(ops.engine, "cancelled") == 3
    [line] = [r.getMessage() for r in caplog.records if "bulk cancel" in r.getMessage()]
    assert "type demo.echo, tenant acme: 3 cancelled" in line
    assert line.startswith("ops console: key ")


async def test_a_bulk_cancel_by_entity_and_creation_time(ops: Console) -> None:
    old, new, other = await ops.add_jobs(
        {"status": "pending", "entity_id": "acct-1", "created_at": T0},
        {"status": "pending", "entity_id": "acct-1", "created_at": T0 + timedelta(days=2)},
        {"status": "retrying", "entity_id": "acct-2", "created_at": T0},
    )

    done = await ops.act(
        "/ops/bulk/cancel", entity="acct-1", created_before="2026-12-02", status="pending"
    )

    assert "1 cancelled" in done.text
    assert await _statuses(ops.engine, [old, new, other]) == ["cancelled", "pending", "retrying"]


async def test_a_filter_that_matches_nothing_says_so_and_changes_nothing(ops: Console) -> None:
    [job] = await ops.add_jobs({"status": "pending"})

    asked = await ops.act("/ops/bulk/cancel", confirm=False, type="nope")

    assert asked.status_code == 200
    assert "id=no-match" in asked.text
    assert "name=confirm" not in asked.text
    assert await _statuses(ops.engine, [job]) == ["pending"]


@pytest.mark.parametrize(
    ("action", "form", "said"),
    [
        ("cancel", {"type": "demo.echo", "status": "succeeded"}, "a bulk cancel takes jobs"),
        ("cancel", {"type": "demo.echo", "status": "nope"}, "status is one of"),
        ("redrive", {"status": "pending"}, "a bulk redrive takes jobs that are failed"),
        ("cancel", {"created_before": "yesterday"}, "is a time such as"),
        ("redrive", {"type": "t" * 300}, "at most 255"),
        ("cancel", {"entity": "e" * 300}, "entity is at most 255"),
        ("cancel", {"tenant": "acme"}, "give at least one of"),
    ],
)
@pytest.mark.parametrize("confirm", [False, True])
async def test_bad_bulk_filters_are_a_400_page_that_says_why(
    ops: Console, action: str, form: dict[str, str], said: str, confirm: bool
) -> None:
    [job] = await ops.add_jobs({"status": "pending", "tenant_id": "acme"})

    response = await ops.act(f"/ops/bulk/{action}", confirm=confirm, **form)

    assert response.status_code == 400, response.text
    assert said in response.text
    assert "id=problem" in response.text
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert await _statuses(ops.engine, [job]) == ["pending"]


async def test_an_unknown_bulk_action_is_a_404_page(ops: Console) -> None:
    response = await ops.act("/ops/bulk/delete", type="demo.echo")

    assert response.status_code == 404
    assert "id=not-found" in response.text


async def test_a_bulk_cancel_stops_at_its_batch_bound_and_says_more_are_left(
    ops: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobrail.jobs.cancel, "BATCH", 2)
    monkeypatch.setattr(jobrail.jobs.cancel, "MAX_BATCHES", 2)
    monkeypatch.setattr(jobrail.ops.console_bulk, "COUNT_CAP", 3)
    ids = await ops.add_jobs(
        *({"status": "pending", "created_at": T0 + timedelta(minutes=i)} for i in range(5))
    )

    asked = await ops.act("/ops/bulk/cancel", confirm=False, type="demo.echo")
    first = await ops.act("/ops/bulk/cancel", type="demo.echo")
    after_first = await _statuses(ops.engine, ids)
    second = await ops.act("/ops/bulk/cancel", type="demo.echo")

    assert "Cancel at least 3 jobs" in asked.text
    assert "4 cancelled, 0 running asked to stop; more jobs match: run it again." in first.text
    assert sorted(after_first) == ["cancelled"] * 4 + ["pending"]
    assert after_first[-1] == "pending"  # oldest first: the newest is left
    assert "1 cancelled, 0 running asked to stop." in second.text
    assert await _statuses(ops.engine, ids) == ["cancelled"] * 5


async def test_a_bulk_redrive_runs_the_matching_failed_jobs_again_in_bounded_batches(
    ops: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobrail.ops.bulk, "BATCH", 2)
    monkeypatch.setattr(jobrail.ops.bulk, "MAX_BATCHES", 2)
    taken = await ops.add_jobs(
        *(_failed(entity_id="acct-1", created_at=T0 + timedelta(minutes=i)) for i in range(5))
    )
    kept = await ops.add_jobs(_failed(entity_id="acct-2"), {"entity_id": "acct-1"})

    asked = await ops.act("/ops/bulk/redrive", confirm=False, entity="acct-1")
    without_token = await ops.act("/ops/bulk/redrive", csrf=False, entity="acct-1")
    assert "Redrive 5 jobs (status failed, entity acct-1)?" in asked.text
    assert without_token.status_code == 403
    assert await _event_count(ops.engine, "redriven") == 0

    first = await ops.act("/ops/bulk/redrive", entity="acct-1")
    second = await ops.act("/ops/bulk/redrive", entity="acct-1")

    assert "4 redriven, 0 skipped; more failed jobs match: run it again" in first.text
    assert "1 redriven, 0 skipped" in second.text
    assert "run it again" not in second.text
    assert await _event_count(ops.engine, "redriven") == 5
    for job_id in taken:  # the in-process worker runs them again
        await _until(ops, str(job_id), "succeeded")
    assert await _statuses(ops.engine, kept) == ["failed", "succeeded"]


async def _noted(engine: AsyncEngine, count: int) -> bool:
    async with engine.connect() as conn:
        found = await conn.scalar(select(func.count()).select_from(job_attempt_failures))
    return found == count


async def test_a_failed_jobs_page_shows_each_failed_attempts_traceback(ops: Console) -> None:
    retried = await _echo(ops, fail_times=1)
    failed = await _echo(ops, permanent=True)
    await _until(ops, retried, "succeeded")
    await _until(ops, failed, "failed")
    # Each note is written beside the attempt's end, not before it.
    await wait_for(lambda: _noted(ops.engine, 2), what="two failed attempts noted")

    retried_page = await ops.page(f"/ops/jobs/{retried}")
    failed_page = await ops.page(f"/ops/jobs/{failed}")

    first, second = texts(retried_page, "attempts")
    assert "Traceback (most recent call last)" in first["error"]
    assert "asked to fail 1 time(s); this was attempt 1" in first["error"]
    assert "jobrail/demo/jobs.py" in first["error"]
    assert "Traceback" not in second["error"]
    [only] = texts(failed_page, "attempts")
    assert "PermanentError: asked to fail permanently" in only["error"]
    assert 'data-traceback="1"' in failed_page
    async with ops.engine.connect() as conn:
        noted = (await conn.execute(select(job_attempt_failures))).mappings().all()
    by_job = {str(row["job_id"]): row for row in noted}
    assert set(by_job) == {retried, failed}
    assert by_job[failed]["error"] == "permanent error: PermanentError: asked to fail permanently"
    assert by_job[retried]["attempt"] == 1


def test_a_long_traceback_keeps_its_start_and_its_end_within_the_cap() -> None:
    try:
        raise ValueError("x" * 20_000 + " the bottom")
    except ValueError as exc:
        text = formatted(exc)

    assert len(text) <= MAX_TRACEBACK_CHARS
    assert text.startswith("Traceback (most recent call last)")
    assert text.rstrip().endswith("xxx the bottom")
    assert "characters cut" in text


async def test_a_running_job_shows_the_cancel_button_and_ends_cancelled(ops: Console) -> None:
    job_id = await _echo(ops, sleep_ms=120_000)
    await _until(ops, job_id, "running")
    assert 'id="cancel"' in await ops.page(f"/ops/jobs/{job_id}")

    done = await ops.act(f"/ops/jobs/{job_id}/cancel")

    assert done.status_code == 303
    assert done.headers["location"].endswith("?note=cancel-requested")
    await _until(ops, job_id, "cancelled")
    assert 'id="cancel"' not in await ops.page(f"/ops/jobs/{job_id}")


async def test_a_bulk_action_wants_a_signed_in_admin(ops: Console) -> None:
    [job] = await ops.add_jobs({"status": "pending"})
    ops.browser.cookies.clear()

    response = await ops.browser.post(
        "/ops/bulk/cancel", data={"type": "demo.echo", "confirm": "yes", "csrf_token": ops.csrf}
    )

    assert response.status_code == 401
    assert 'id="api_key"' in response.text or "id=api_key" in response.text
    assert await _statuses(ops.engine, [job]) == ["pending"]
