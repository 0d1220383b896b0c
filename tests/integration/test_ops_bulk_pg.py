"""The bulk actions' reads on Postgres (jobrail.ops.bulk_store.SqlaBulkJobs): the failed
jobs a filter takes in keyset pages, oldest first, through ties of creation time; a
count that stops at its cap; a cancel's count that leaves out jobs asked to stop."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.cancel import CANCELLABLE
from jobrail.jobs.domain import JobStatus
from jobrail.jobs.ports import CancelFilter
from jobrail.ops.bulk_store import SqlaBulkJobs
from jobrail.store.tables import jobs

pytestmark = [pytest.mark.integration]

T0 = datetime(2026, 12, 1, tzinfo=UTC)
FAILED = CancelFilter(statuses=frozenset({JobStatus.FAILED}), type="demo.echo")


async def _add(engine: AsyncEngine, *rows: dict[str, Any]) -> list[uuid.UUID]:
    full = [
        {
            "id": uuid.uuid4(),
            "tenant_id": "acme",
            "type": "demo.echo",
            "queue": "jobs.default",
            "status": "failed",
            "payload": {},
            "max_attempts": 3,
            "trace_context": {},
            "created_at": T0,
            "updated_at": T0,
            **row,
        }
        for row in rows
    ]
    async with engine.begin() as conn:
        for row in full:
            await conn.execute(insert(jobs).values(row))
    return [row["id"] for row in full]


async def test_failed_jobs_come_in_keyset_pages_oldest_first_through_ties(
    engine: AsyncEngine,
) -> None:
    # Three share one creation time: pages must split them by id, losing none.
    times = [T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=1), T0 + timedelta(seconds=1)]
    ids = await _add(engine, *({"created_at": at} for at in [*times, T0 + timedelta(seconds=2)]))
    await _add(engine, {"type": "sync.account"}, {"status": "pending"}, {"entity_id": "x"})
    bulk = SqlaBulkJobs(engine)

    pages, after = [], None
    while page := await bulk.failed(FAILED, 2, after):
        pages.append(page)
        after = page[-1]

    found = [position.job_id for page in pages for position in page]
    assert [len(page) for page in pages] == [2, 2, 2]
    assert len(found) == len(set(found)) == 6  # five, and the one with an entity
    expected = sorted(zip([*times, T0 + timedelta(seconds=2)], ids, strict=True))
    in_order = [job_id for job_id in found if job_id in ids]
    assert in_order == [job_id for _, job_id in expected]
    by_entity = CancelFilter(statuses=FAILED.statuses, entity_id="x")
    assert len(await bulk.failed(by_entity, 10, None)) == 1


async def test_the_count_stops_at_its_cap_and_a_cancels_leaves_out_jobs_asked_to_stop(
    engine: AsyncEngine,
) -> None:
    await _add(engine, *({"status": "pending"} for _ in range(4)))
    await _add(engine, {"status": "running", "cancel_requested": True}, {"status": "running"})
    bulk = SqlaBulkJobs(engine)
    active = CancelFilter(statuses=CANCELLABLE, tenant_id="acme")

    assert await bulk.count(active, 100, cancellable=True) == 5
    assert await bulk.count(active, 100, cancellable=False) == 6
    assert await bulk.count(active, 3, cancellable=True) == 3
    assert await bulk.count(FAILED, 100, cancellable=False) == 0
