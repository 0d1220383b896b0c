"""The console overview's reads on Postgres with 100,000 jobs over two days and two days
of samples: each is read from an index (EXPLAIN of the statements jobrail.ops and
jobrail.maintenance.sample_sql run), none scans the jobs table, and the samples' reads
take the minutes they ask for. The rows are written by one INSERT each, with the event
triggers off for that transaction (these reads do not touch events)."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from jobrail.kernel.clock import SystemClock
from jobrail.maintenance.sample_sql import (
    NEWEST_MINUTE,
    WAITING_BY_QUEUE,
    SqlaOverviewSamples,
    finished_query,
    samples_query,
    started_query,
    totals_query,
)
from jobrail.maintenance.sampling import SampleOverview
from jobrail.ops.persistence import LIVE_COUNTS, failures_query

pytestmark = [pytest.mark.integration]

ROWS = 100_000
NOW = datetime(2026, 12, 6, tzinfo=UTC)
MINUTE = NOW - timedelta(hours=3)

# One job in 50 not ended (pending, running, retrying, blocked); the others ended over the
# two days before NOW, started 0-9 s after they were created and finished 1 s later.
FILL_JOBS = f"""
INSERT INTO jobs (id, tenant_id, type, queue, status, payload, max_attempts, trace_context,
                  created_at, updated_at, started_at, finished_at)
SELECT gen_random_uuid(), 't' || (i % 50), 'type.' || (i % 40),
       CASE WHEN i % 20 = 0 THEN 'jobs.high' ELSE 'jobs.default' END,
       CASE WHEN i % 50 = 0 THEN (ARRAY['pending', 'running', 'retrying', 'blocked'])[1 + i % 4]
            ELSE (ARRAY['succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled'])[1 + i % 5]
       END,
       '{{}}'::jsonb, 3, '{{}}'::jsonb,
       created, now(),
       CASE WHEN i % 50 = 0 THEN NULL ELSE created + (i % 10) * INTERVAL '1 second' END,
       CASE WHEN i % 50 = 0 THEN NULL ELSE created + (i % 10 + 1) * INTERVAL '1 second' END
FROM generate_series(1, {ROWS}) AS i,
     LATERAL (SELECT TIMESTAMPTZ '2026-12-06 00:00:00+00' - i * INTERVAL '1.7 second') AS c(created)
"""

# Two days of samples: 40 types by 3 statuses finished, the times to start, 2 queues.
FILL_SAMPLES = """
INSERT INTO ops_samples (metric, minute, label, value)
SELECT metric, TIMESTAMPTZ '2026-12-06 00:00:00+00' - m * INTERVAL '1 minute', label, 1
FROM generate_series(0, 2 * 1440) AS m,
     (SELECT 'finished', 'type.' || t || '|' || s
      FROM generate_series(0, 39) AS t, unnest(ARRAY['succeeded', 'failed', 'cancelled']) AS s
      UNION ALL SELECT 'started', '' UNION ALL SELECT 'start_p50', ''
      UNION ALL SELECT 'start_p95', ''
      UNION ALL SELECT 'waiting', 'jobs.default' UNION ALL SELECT 'waiting', 'jobs.high')
     AS kinds(metric, label)
"""

CASES: dict[str, tuple[Select[Any], str]] = {
    "live counts": (LIVE_COUNTS, "ix_jobs_live"),
    # Either index reads the jobs waiting alone (by their status).
    "waiting by queue": (WAITING_BY_QUEUE, "ix_jobs_live or ix_jobs_status_created"),
    "finished in a minute": (
        finished_query(MINUTE, MINUTE + timedelta(minutes=1)),
        "ix_jobs_finished",
    ),
    "started in a minute": (
        started_query(MINUTE, MINUTE + timedelta(minutes=1)),
        "ix_jobs_started",
    ),
    "newest failures": (failures_query(20), "ix_jobs_failed_finished"),
    "the hour's samples": (
        samples_query(["finished", "start_p50", "start_p95", "waiting"], NOW - timedelta(hours=1)),
        "pk_ops_samples or ix_ops_samples_minute",
    ),
    "the day's finished": (
        totals_query(NOW - timedelta(days=1), NOW),
        "pk_ops_samples or ix_ops_samples_minute",
    ),
    "newest sample": (NEWEST_MINUTE, "ix_ops_samples_minute"),
}


async def test_every_read_of_the_overview_is_served_by_an_index(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL session_replication_role = replica"))
        await conn.execute(text(FILL_JOBS))
        await conn.execute(text(FILL_SAMPLES))
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE jobs"))
        await conn.execute(text("ANALYZE ops_samples"))

    plans = {case: await _plan(engine, query) for case, (query, _) in CASES.items()}

    for case, (_, index) in CASES.items():
        assert "Seq Scan" not in plans[case], (case, plans[case])
        assert any(name in plans[case] for name in index.split(" or ")), (case, plans[case])
    assert plans["newest failures"].startswith("Limit"), plans["newest failures"]
    assert plans["newest sample"].startswith("Limit"), plans["newest sample"]
    # The minute's reads take its rows alone: about 35 of the 100,000.
    for case in ("finished in a minute", "started in a minute"):
        rows = await _rows_read(engine, CASES[case][0])
        assert rows < 200, (case, rows)


async def _plan(engine: AsyncEngine, query: Select[Any]) -> str:
    async with engine.connect() as conn:
        return "\n".join((await conn.execute(text(f"EXPLAIN {_sql(query)}"))).scalars())


async def _rows_read(engine: AsyncEngine, query: Select[Any]) -> int:
    async with engine.connect() as conn:
        plan = (await conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {_sql(query)}"))).scalar()
    node = plan[0]["Plan"]
    while node.get("Plans"):
        node = node["Plans"][0]
    return int(node["Actual Rows"])


def _sql(query: Select[Any]) -> str:
    compiled = query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    return str(compiled)


async def test_two_samplers_at_once_write_the_same_rows_once(
    engine: AsyncEngine, database_url: str
) -> None:
    # Five jobs finished three minutes ago, written as they are by the runner.
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    finished = now - timedelta(minutes=3) + timedelta(seconds=10)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO jobs (id, tenant_id, type, queue, status, payload, max_attempts, "
                "trace_context, created_at, updated_at, started_at, finished_at) "
                "SELECT gen_random_uuid(), 't', 'type.a', 'jobs.default', 'succeeded', "
                "'{}'::jsonb, 3, '{}'::jsonb, :at, :at, :at, :at FROM generate_series(1, 5)"
            ),
            {"at": finished},
        )
    other = create_async_engine(database_url)
    try:
        one = SampleOverview(SqlaOverviewSamples(engine), SystemClock())
        two = SampleOverview(SqlaOverviewSamples(other), SystemClock())
        await asyncio.gather(one(), two())
        await asyncio.gather(one(), two())
    finally:
        await other.dispose()

    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT minute, value FROM ops_samples WHERE metric = 'finished'")
            )
        ).all()
        minutes = await conn.scalar(
            text("SELECT count(DISTINCT minute) FROM ops_samples WHERE metric = 'started'")
        )
    assert [(minute, value) for minute, value in rows] == [(now - timedelta(minutes=3), 5)]
    assert minutes in (61, 62)  # the last hour and this minute (a next one if it turned)
