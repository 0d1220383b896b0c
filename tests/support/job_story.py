"""A job that reported progress many times, and what its ops page and its JSON events page
show of it: the same lines, its progress folded between its other events. Both modes run
it (tests/api/test_ops_events.py, tests/integration/test_ops_events_pg.py)."""

import re
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs
from tests.support.fixtures import ApiClient
from tests.support.ops_pages import texts

REPORTS = 200


async def run_with_progress(engine: AsyncEngine, job_id: uuid.UUID) -> None:
    """What a worker writes of a job that reports its progress `REPORTS` times: started,
    a progress event per report, succeeded (as the triggers record them)."""
    async with engine.begin() as conn:
        job = jobs.c.id == job_id
        await conn.execute(update(jobs).where(job).values(status="running", attempts=1))
        for n in range(REPORTS):
            progress = {
                "current": n + 1,
                "total": REPORTS,
                "message": f"<i>row {n + 1}</i>",
                "updated_at": datetime.now(UTC).isoformat(),
            }
            await conn.execute(update(jobs).where(job).values(progress=progress))
        await conn.execute(
            update(jobs).where(job).values(status="succeeded", finished_at=datetime.now(UTC))
        )


async def check_both_views_fold_its_progress(
    api: ApiClient, job_id: uuid.UUID, admin: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Asserts that the job's JSON events page and its ops page show the same lines:
    enqueued, started, one progress standing for every report with the newest one's
    values, succeeded. Returns the JSON page's items."""
    answer = await api.get(f"/jobs/{job_id}/events")
    assert answer.status_code == 200, answer.text
    page = answer.json()
    ops = await api.get(f"/ops/jobs/{job_id}", headers=admin)
    assert ops.status_code == 200, ops.text

    items = page["items"]
    assert [e["event"] for e in items] == ["enqueued", "started", "progress", "succeeded"]
    assert [e["folded"] for e in items] == [None, None, REPORTS, None]
    newest = {"current": REPORTS, "total": REPORTS, "message": f"<i>row {REPORTS}</i>"}
    assert {k: items[2]["progress"][k] for k in newest} == newest
    assert page["last_event_id"] == items[-1]["id"]

    lines = texts(ops.text, "events")
    assert [line["event"] for line in lines] == [e["event"] for e in items]
    assert re.findall(r'data-event="([^"]+)"', ops.text) == [e["id"] for e in items]
    assert lines[2]["details"] == f"{REPORTS} / {REPORTS} <i>row {REPORTS}</i> (the newest of 200)"
    assert "<i>" not in ops.text  # escaped
    assert "The first" not in ops.text  # the whole story fits
    return list(items)
