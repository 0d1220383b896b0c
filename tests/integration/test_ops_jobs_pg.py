"""The console's job list on Postgres with 100,000 jobs: every filter's page is read
from an index and stops at its LIMIT; none scans the jobs table (EXPLAIN of the query
jobrail.ops.persistence.SqlaJobSearch runs). The rows are written by one INSERT with
the event triggers off for that transaction (the list does not read events)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import JobStatus
from jobrail.jobs.ports import Cursor
from jobrail.kernel.ids import JobId
from jobrail.ops.job_search import JobSearchFilter
from jobrail.ops.persistence import SqlaJobSearch

pytestmark = [pytest.mark.integration]

ROWS = 100_000
NOW = datetime(2026, 12, 6, tzinfo=UTC)

FILL = f"""
INSERT INTO jobs (id, tenant_id, type, queue, status, payload, max_attempts, trace_context,
                  created_at, updated_at, idempotency_key, unique_key, entity_id)
SELECT gen_random_uuid(), 't' || (i % 50), 'type.' || (i % 40),
       CASE WHEN i % 20 = 0 THEN 'jobs.high' ELSE 'jobs.default' END,
       (ARRAY['succeeded', 'succeeded', 'succeeded', 'succeeded', 'failed'])[1 + i % 5],
       '{{}}'::jsonb, 3, '{{}}'::jsonb,
       TIMESTAMPTZ '2026-12-06 00:00:00+00' - i * INTERVAL '1 second', now(),
       CASE WHEN i % 7 = 0 THEN 'idem-' || i END, CASE WHEN i % 11 = 0 THEN 'uniq-' || i END,
       'order-' || (i % 500)
FROM generate_series(1, {ROWS}) AS i
"""

AFTER = Cursor(NOW - timedelta(hours=3), JobId(uuid.UUID(int=2**127)))

CASES = {
    "newest": (JobSearchFilter(), None, "ix_jobs_created_id"),
    "next page": (JobSearchFilter(), AFTER, "ix_jobs_created_id"),
    "status": (JobSearchFilter(status=JobStatus.FAILED), AFTER, "ix_jobs_status_created"),
    "type": (JobSearchFilter(type="type.7"), None, "ix_jobs_type_created"),
    "queue": (JobSearchFilter(queue="jobs.high"), AFTER, "ix_jobs_queue_created"),
    "tenant": (JobSearchFilter(tenant_id="t3"), None, "ix_jobs_tenant_created"),
    "tenant and status": (
        JobSearchFilter(tenant_id="t3", status=JobStatus.FAILED),
        None,
        "ix_jobs_tenant_status_created",
    ),
    "time range": (
        JobSearchFilter(created_from=NOW - timedelta(hours=5), created_to=NOW - timedelta(hours=4)),
        None,
        "ix_jobs_created_id",
    ),
    "entity": (
        JobSearchFilter(tenant_id="t3", entity_id="order-3"),
        AFTER,
        "ix_jobs_tenant_entity_created",
    ),
    "id": (JobSearchFilter(job_id=JobId(uuid.uuid4())), None, "pk_jobs"),
    "key": (JobSearchFilter(key="idem-700"), None, "ix_jobs_idempotency_key"),
}


async def test_every_page_of_the_job_list_is_read_from_an_index_up_to_its_limit(
    engine: AsyncEngine,
) -> None:
    # One table of 100,000 rows for every case: filling it is most of the test's time.
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL session_replication_role = replica"))
        await conn.execute(text(FILL))
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE jobs"))

    plans = {case: await _plan(engine, where, after) for case, (where, after, _) in CASES.items()}

    for case, (_, _, index) in CASES.items():
        plan = plans[case]
        assert "Seq Scan" not in plan, (case, plan)
        assert plan.startswith("Limit"), (case, plan)
        assert index in plan, (case, plan)
    assert "ix_jobs_unique_key" in plans["key"], plans["key"]  # the key is either kind


async def _plan(engine: AsyncEngine, where: JobSearchFilter, after: Cursor | None) -> str:
    query = SqlaJobSearch.query(where, 51, after)
    sql = query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    async with engine.connect() as conn:
        return "\n".join((await conn.execute(text(f"EXPLAIN {sql}"))).scalars())
