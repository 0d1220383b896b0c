"""The console's overview in embedded mode (SQLite, the in-process worker): its charts of
the last hour show the numbers of the jobs written for them, from the minutes sampled by
housekeeping and from the jobs of the last minutes alike; its counts show the jobs not
ended now and the ended ones of the last day; its reads are kept a few seconds, so that
a second tab within them costs no query; and an htmx refresh whose session ended is sent
to the sign-in page. (tests/integration/test_ops_overview_pg.py: the plans on Postgres.)"""

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, update

from jobrail.maintenance.sample_sql import totals_query
from jobrail.maintenance.sampling import SampleOverview
from jobrail.runtime.app import runtime_of
from jobrail.store.tables import ops_samples, ops_sessions
from tests.support.console import Console, console

TYPE = "demo.chart"  # no job of this type runs: its rows are written by the test alone
# The samples are taken by the test when it says: no scheduler in the app.
NO_SCHEDULER = {"embedded": False}


class _Charts(HTMLParser):
    """The points of the overview's charts: (chart id, series, HH:MM) -> value."""

    def __init__(self) -> None:
        super().__init__()
        self.points: dict[tuple[str, str, str], float] = {}
        self._chart = ""
        self._series = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "figure":
            self._chart = found.get("id") or ""
        elif tag == "g":
            self._series = found.get("data-series") or ""
        elif tag in ("rect", "circle") and "data-minute" in found:
            series = self._series if tag == "circle" else ""
            key = (self._chart, series, found["data-minute"] or "")
            self.points[key] = float(found["data-value"] or 0)

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._series = ""


def _points(page: str) -> dict[tuple[str, str, str], float]:
    parser = _Charts()
    parser.feed(page)
    return parser.points


def _count(page: str, job_type: str, status: str) -> int:
    cell = re.search(rf'data-type="{re.escape(job_type)}" data-status="{status}">(\d+)<', page)
    assert cell, (job_type, status)
    return int(cell.group(1))


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Console]:
    async with console(tmp_path, scheduler=NO_SCHEDULER) as running:
        yield running


def _finished(at: datetime, status: str, started: datetime, **row: Any) -> dict[str, Any]:
    return {
        "type": TYPE,
        "status": status,
        "created_at": row.pop("created_at", started),
        "started_at": started,
        "finished_at": at,
        **row,
    }


async def test_the_charts_show_each_minutes_finished_failed_time_to_start_and_waiting_jobs(
    ops: Console,
) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    old = now - timedelta(minutes=20)  # older than the minutes read from the jobs
    recent = now - timedelta(minutes=1)
    started = old + timedelta(seconds=20)
    await ops.add_jobs(
        # Minute `old`: 3 succeeded and 1 failed, started 1, 2, 3 (after its run_after)
        # and 10 seconds after they could run: p50 2 s, p95 10 s.
        _finished(
            old + timedelta(seconds=30),
            "succeeded",
            started,
            created_at=started - timedelta(seconds=1),
        ),
        _finished(
            old + timedelta(seconds=31),
            "succeeded",
            started,
            created_at=started - timedelta(seconds=2),
        ),
        _finished(
            old + timedelta(seconds=32),
            "succeeded",
            started,
            created_at=started - timedelta(seconds=100),
            run_after=started - timedelta(seconds=3),
        ),
        _finished(
            old + timedelta(seconds=40),
            "failed",
            started,
            created_at=started - timedelta(seconds=10),
        ),
        # Minute `recent`: 2 failed.
        _finished(recent + timedelta(seconds=5), "failed", recent),
        _finished(recent + timedelta(seconds=6), "failed", recent),
        # Not ended: 3 pending and 1 retrying wait in two queues, 1 runs.
        *[{"type": TYPE, "status": "pending", "queue": "jobs.default"} for _ in range(3)],
        {"type": TYPE, "status": "retrying", "queue": "jobs.high"},
        {"type": TYPE, "status": "running", "queue": "jobs.default", "started_at": now},
    )
    o, r, n = old.strftime("%H:%M"), recent.strftime("%H:%M"), now.strftime("%H:%M")

    # Before housekeeping ever sampled: the last minutes only, read from the jobs.
    page = await ops.page("/ops")
    points = _points(page)
    assert points[("chart-failures", "", r)] == 2
    assert points[("chart-throughput", "", r)] >= 2
    assert ("chart-throughput", "", o) not in points
    assert points[("chart-waiting", "jobs.default", n)] == 3
    assert points[("chart-waiting", "jobs.high", n)] == 1
    assert _count(page, TYPE, "pending") == 3
    assert _count(page, TYPE, "running") == 1
    assert _count(page, TYPE, "failed") == 2

    sample = await runtime_of(ops.app).container.get(SampleOverview)
    await sample()
    await sample()  # again: the same rows

    page = await ops.page("/ops")
    points = _points(page)
    assert points[("chart-throughput", "", o)] == 4
    assert points[("chart-failures", "", o)] == 1
    assert points[("chart-start", "p50", o)] == 2
    assert points[("chart-start", "p95", o)] == 10
    assert points[("chart-failures", "", r)] == 2
    assert _count(page, TYPE, "succeeded") == 3
    assert _count(page, TYPE, "failed") == 3
    assert _count(page, TYPE, "retrying") == 1
    assert 'id="failed-total">3<' in page

    assert "style=" not in page  # the CSP allows no inline style: classes colour the charts
    # The htmx refresh carries the charts too.
    live = await ops.browser.get("/ops", headers={"HX-Request": "true"})
    assert live.status_code == 200
    assert _points(live.text)[("chart-throughput", "", o)] == 4
    assert "<html" not in live.text


async def test_samples_older_than_a_day_are_deleted_and_a_run_writes_each_row_once(
    ops: Console,
) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    async with ops.engine.begin() as conn:
        await conn.execute(
            ops_samples.insert().values(
                metric="finished", minute=now - timedelta(days=2), label=f"{TYPE}|failed", value=5
            )
        )
    sample = await runtime_of(ops.app).container.get(SampleOverview)

    first = await sample()
    async with ops.engine.connect() as conn:
        rows = await conn.scalar(select(func.count()).select_from(ops_samples))
    second = await sample()
    async with ops.engine.connect() as conn:
        again = await conn.scalar(select(func.count()).select_from(ops_samples))
        older = await conn.scalar(
            select(func.count()).where(ops_samples.c.minute < now - timedelta(days=1))
        )

    assert first.deleted == 1
    assert second.deleted == 0
    assert first.minutes == 61  # the last hour and this minute, on the first run
    assert rows == again
    assert older == 0


async def test_a_second_request_within_the_cache_window_reads_nothing(tmp_path: Path) -> None:
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    def reads_of_jobs() -> list[str]:
        return [s for s in statements if re.search(r"\b(jobs|ops_samples)\b", s)]

    async with console(
        tmp_path / "cached", ops={"overview_cache_s": 60}, scheduler=NO_SCHEDULER
    ) as ops:
        event.listen(ops.engine.sync_engine, "before_cursor_execute", seen)
        first = await ops.page("/ops")  # the sign-in's page view loaded it already
        await ops.add_jobs({"type": TYPE, "status": "pending"})
        statements.clear()
        second = await ops.page("/ops")
        tab = await ops.browser.get("/ops", headers={"HX-Request": "true"})

        assert tab.status_code == 200
        assert reads_of_jobs() == []
        assert f'data-type="{TYPE}"' not in second  # the job added within the window
        assert first.count("<svg") == second.count("<svg") == 4
        event.remove(ops.engine.sync_engine, "before_cursor_execute", seen)

    # Without the cache, the same request reads the jobs: the listener sees them.
    async with console(tmp_path / "uncached", ops={"overview_cache_s": 0}) as ops:
        event.listen(ops.engine.sync_engine, "before_cursor_execute", seen)
        statements.clear()
        now = datetime.now(UTC)
        minute = now.minute
        await ops.page("/ops")
        assert reads_of_jobs()
        await ops.page("/ops")
        # The day's sum of samples (read by the sign-in's page view) is read again once a
        # minute, not for each request.
        assert "sum(" in str(totals_query(now, now)).lower()
        if datetime.now(UTC).minute == minute:
            assert not [s for s in statements if "sum(" in s.lower()]
        event.remove(ops.engine.sync_engine, "before_cursor_execute", seen)


async def test_an_htmx_request_whose_session_ended_is_sent_to_the_sign_in_page(
    ops: Console,
) -> None:
    async with ops.engine.begin() as conn:
        await conn.execute(
            update(ops_sessions).values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )

    refresh = await ops.browser.get("/ops", headers={"HX-Request": "true"})
    job_refresh = await ops.browser.get(
        "/ops/jobs/00000000-0000-0000-0000-000000000000", headers={"HX-Request": "true"}
    )
    page = await ops.browser.get("/ops")

    assert refresh.status_code == 401
    assert refresh.headers["HX-Redirect"] == "/ops"
    assert refresh.text == ""  # nothing to swap into the page
    assert "default-src 'none'" in refresh.headers["Content-Security-Policy"]
    assert job_refresh.headers["HX-Redirect"] == "/ops"
    # A whole page (no htmx) is the sign-in page itself, as before.
    assert page.status_code == 401
    assert "HX-Redirect" not in page.headers
    assert 'name="api_key"' in page.text or "name=api_key" in page.text
