"""Where a held job stands in its tenant's line (jobrail.store.places) on SQLite and
Postgres alike: the held jobs of its queue and tenant ahead of it in the dispatcher's
order, counted up to a cap, those of a higher priority among them, and the queue's
figures for an estimate; read on the held line's index, not over ``jobs``."""

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.priority import Priority
from jobrail.kernel.ids import TenantId
from jobrail.store.jobs import SqlaJobIntake
from jobrail.store.places import SqlaLinePlaces
from jobrail.store.tables import dispatch_queues, jobs, tenants
from jobrail.transport.codec import encode
from tests.fakes import START, make_job
from tests.support.services import store_engine

TABLES = "jobs, outbox, dispatch_queues, dispatch_arrivals, dispatch_pauses, tenants CASCADE"


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = await store_engine(request, tmp_path, TABLES)
    yield engine
    await engine.dispose()


async def _add(engine: AsyncEngine, *added: Job) -> None:
    intake = SqlaJobIntake(async_sessionmaker(engine))
    for job in added:
        await intake.add(job, encode(JobMessage.of(job)))


def held(at: float, tenant: str = "a", **overrides: Any) -> Job:
    """A held job placed `at` seconds after START in its tenant's line."""
    job = make_job(tenant_id=TenantId(tenant), **overrides)
    job.hold(rank_at=START + timedelta(seconds=at))
    return job


async def test_a_held_job_counts_only_its_tenant_s_held_jobs_ahead_in_its_queue(
    engine: AsyncEngine,
) -> None:
    line = [held(n) for n in range(3)]
    tied = sorted([held(3), held(3)], key=lambda job: job.id)  # one rank: by id
    mine = held(5)
    others = [
        held(0, tenant="b"),  # another tenant's line
        held(0, queue="jobs.high"),  # another queue's
        make_job(tenant_id=TenantId("a")),  # released: on its way to the workers
        held(1),  # ended below
        held(9),  # behind it
    ]
    await _add(engine, *line, *tied, mine, *others)
    async with engine.begin() as conn:
        await conn.execute(update(jobs).where(jobs.c.id == others[3].id).values(status="cancelled"))
    places = SqlaLinePlaces(engine)

    assert (await places.place_of(mine)).ahead == 5
    assert (await places.place_of(line[0])).ahead == 0
    assert (await places.place_of(tied[0])).ahead == 3
    assert (await places.place_of(tied[1])).ahead == 4
    assert (await places.place_of(others[4])).ahead == 6
    assert not (await places.place_of(mine)).capped


async def test_the_jobs_of_a_higher_priority_ahead_are_counted_apart(engine: AsyncEngine) -> None:
    ahead = [held(0, priority=Priority.HIGH), held(1), held(2, priority=Priority.URGENT)]
    normal, high = held(5), held(6, priority=Priority.HIGH)
    await _add(engine, *ahead, normal, high)
    places = SqlaLinePlaces(engine)

    assert (await places.place_of(normal)).higher_ahead == 2
    assert (await places.place_of(high)).higher_ahead == 1  # the urgent one
    assert (await places.place_of(ahead[0])).higher_ahead == 0


async def test_the_count_stops_at_the_cap_and_says_there_are_more(engine: AsyncEngine) -> None:
    line = [held(n) for n in range(6)]
    await _add(engine, *line)
    places = SqlaLinePlaces(engine, cap=3)

    at_cap, past_cap = await places.place_of(line[3]), await places.place_of(line[5])

    assert (at_cap.ahead, at_cap.capped) == (3, False)
    assert (past_cap.ahead, past_cap.capped) == (3, True)


async def test_the_queue_s_figures_and_the_tenant_s_weight_come_with_it(
    engine: AsyncEngine,
) -> None:
    mine, heavy = held(0), held(0, tenant="heavy")
    await _add(engine, mine, heavy)
    places = SqlaLinePlaces(engine)

    unmeasured = await places.place_of(mine)
    async with engine.begin() as conn:
        await conn.execute(dispatch_queues.insert().values(queue="jobs.default", drain_per_s=12.5))
        await conn.execute(
            tenants.insert().values(id="heavy", admin=False, created_at=START, weight=3.0)
        )
    half_measured = await places.place_of(mine)
    async with engine.begin() as conn:
        await conn.execute(update(dispatch_queues).values(active_weight=4.0))
    measured, weighted = await places.place_of(mine), await places.place_of(heavy)

    assert (unmeasured.drain_per_s, unmeasured.active_weight, unmeasured.weight) == (
        None,
        None,
        1.0,
    )
    assert (half_measured.drain_per_s, half_measured.active_weight) == (12.5, None)
    assert (measured.drain_per_s, measured.active_weight, measured.weight) == (12.5, 4.0, 1.0)
    assert weighted.weight == 3.0


async def test_the_read_walks_the_held_line_s_index(engine: AsyncEngine) -> None:
    """The statement as it is sent, explained: the planner reads ``ix_jobs_held_lines`` (on
    Postgres with sequential scans off, as a table this small would be read whole)."""
    line = [held(n) for n in range(20)]
    await _add(engine, *line)
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", capture)
    try:
        await SqlaLinePlaces(engine).place_of(line[-1])
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", capture)
    [(statement, parameters)] = sent
    postgres = engine.dialect.name == "postgresql"
    async with engine.begin() as conn:
        if postgres:
            await conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        prefix = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
        plan = "\n".join(
            str(row[-1]) for row in await conn.exec_driver_sql(prefix + statement, parameters)
        )

    print(plan)
    assert "ix_jobs_held_lines" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    assert "SCAN jobs" not in plan, plan
