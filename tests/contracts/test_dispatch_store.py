"""The dispatcher's store (jobrail.store.dispatch) on SQLite and Postgres alike: a held
job has no message until a pass releases it, one holder at a time has a queue's lease,
and a pass that does not commit releases nothing."""

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.ids import TenantId
from jobrail.settings import DatabaseSettings
from jobrail.store.dispatch import SqlaDispatchStore
from jobrail.store.jobs import SqlaJobIntake, SqlaJobStore
from jobrail.store.pg_intake import PgJobIntake
from jobrail.store.pg_pool import create_pool
from jobrail.store.tables import dispatch_arrivals, jobs, outbox, tenants
from jobrail.transport.codec import encode
from tests.fakes import START, make_job
from tests.support.services import store_engine

LEASE = timedelta(seconds=3)
TABLES = "jobs, outbox, dispatch_queues, dispatch_arrivals, tenants CASCADE"


class Subject:
    def __init__(self, engine: AsyncEngine, add: Any) -> None:
        self.engine, self.add = engine, add
        self.store = SqlaDispatchStore(engine)

    async def count(self, table: Any, *where: Any) -> int:
        async with self.engine.connect() as conn:
            return int(await conn.scalar(select(func.count()).select_from(table).where(*where)))


@pytest.fixture(params=["sqlite", "postgres"])
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    engine = await store_engine(request, tmp_path, TABLES)
    pool = None
    if request.param == "sqlite":
        intake: Any = SqlaJobIntake(async_sessionmaker(engine))
    else:
        pool = await create_pool(DatabaseSettings(url=engine.url.render_as_string(False)))
        intake = PgJobIntake(pool)

    async def add(job: Job) -> Job:
        message = JobMessage.of(job)
        return await intake.add(job, encode(message))  # type: ignore[no-any-return]

    yield Subject(engine, add)
    if pool is not None:
        await pool.close()
    await engine.dispose()


def held(tenant: str = "acme", **overrides: Any) -> Job:
    job = make_job(tenant_id=TenantId(tenant), **overrides)
    job.hold()
    return job


async def test_a_held_enqueue_writes_no_message_and_notes_its_tenant(subject: Subject) -> None:
    jobs_ = [held("a"), held("a"), held("b")]
    for job in jobs_:
        await subject.add(job)
    plain = await subject.add(make_job(tenant_id=TenantId("c")))

    assert plain.held_since is None
    assert await subject.count(outbox) == 1  # the plain job's alone
    assert await subject.count(jobs, jobs.c.held_since.is_not(None)) == 3
    assert await subject.count(dispatch_arrivals) == 2  # a and b, once each


async def test_a_pass_takes_the_arrivals_and_reads_each_line_in_order(subject: Subject) -> None:
    a = [held("a", now=START + timedelta(seconds=n)) for n in range(3)]
    b = [held("b")]
    for job in [*reversed(a), *b]:
        await subject.add(job)

    async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
        assert turn is not None
        assert sorted(await turn.arrivals()) == ["a", "b"]
        assert await turn.arrivals() == []  # taken
        assert sorted(await turn.tenants()) == ["a", "b"]
        heads = await turn.heads({"a": 2, "b": 5, "nobody": 1})
    assert heads == {"a": [a[0].id, a[1].id], "b": [b[0].id], "nobody": []}
    assert await subject.count(dispatch_arrivals) == 0


async def test_a_release_hands_back_the_jobs_still_held_waiting_and_in_time(
    subject: Subject,
) -> None:
    ready = held()
    late = held(deadline=START + timedelta(seconds=5))
    cancelled = held()
    for job in (ready, late, cancelled):
        await subject.add(job)
    async with subject.engine.begin() as conn:
        await conn.execute(
            jobs.update().where(jobs.c.id == cancelled.id).values(status="cancelled")
        )

    now = START + timedelta(seconds=10)  # past the late one's deadline
    async with subject.store.turn("jobs.default", "x", now, LEASE) as turn:
        assert turn is not None
        released = await turn.release([ready.id, late.id, cancelled.id], now)
        again = await turn.release([ready.id], now)

    assert [job.id for job in released] == [ready.id]
    assert released[0].held_since is None
    assert again == []  # released once
    claimed = await SqlaJobStore(subject.engine).claim(ready.id, now, LEASE)
    assert claimed.job is not None
    assert claimed.job.status is JobStatus.RUNNING


async def test_a_pass_that_does_not_commit_releases_nothing(subject: Subject) -> None:
    job = held()
    await subject.add(job)

    async def failed_pass() -> None:
        async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
            assert turn is not None
            assert await turn.arrivals() == ["acme"]
            assert len(await turn.release([job.id], START)) == 1
            raise RuntimeError("publish failed")

    with pytest.raises(RuntimeError, match="publish failed"):
        await failed_pass()

    assert await subject.count(jobs, jobs.c.held_since.is_not(None)) == 1
    assert await subject.count(dispatch_arrivals) == 1  # not taken either


async def test_one_holder_at_a_time_has_a_queue_and_a_new_one_gets_a_new_term(
    subject: Subject,
) -> None:
    async def term(holder: str, at: timedelta) -> int | None:
        async with subject.store.turn("jobs.default", holder, START + at, LEASE) as turn:
            return None if turn is None else turn.term

    assert await term("x", timedelta(0)) == 1
    assert await term("y", timedelta(seconds=1)) is None  # x's lease runs
    assert await term("x", timedelta(seconds=2)) == 1  # x keeps it, renewed
    assert await term("y", timedelta(seconds=4)) is None  # renewed at 2 s: until 5 s
    assert await term("y", timedelta(seconds=6)) == 2  # x stopped: y takes over
    assert await term("x", timedelta(seconds=7)) is None
    assert await term("x", timedelta(seconds=6)) is None
    assert (
        await term(
            "z",
            timedelta(seconds=6),
        )
        is None
    )
    # Another queue's lease is apart.
    async with subject.store.turn("jobs.high", "x", START, LEASE) as turn:
        assert turn is not None


# SQLite has one writer at a time: its passes cannot overlap.
@pytest.mark.parametrize("subject", ["postgres"], indirect=True)
async def test_two_passes_over_one_queue_never_overlap(subject: Subject) -> None:
    async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
        assert turn is not None  # the queue's row is made (a pass that makes it waits)
    entered = asyncio.Event()
    leave = asyncio.Event()

    async def long_pass() -> None:
        async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
            assert turn is not None
            entered.set()
            await leave.wait()

    first = asyncio.create_task(long_pass())
    await entered.wait()
    # Even a holder whose turn it would be does not wait for the row: it skips.
    async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
        assert turn is None
    leave.set()
    await first


async def test_a_pass_reads_the_weights_that_are_set(subject: Subject) -> None:
    async with subject.engine.begin() as conn:
        await conn.execute(
            tenants.insert(),
            [
                {"id": "heavy", "admin": False, "created_at": START, "weight": 3.0},
                {"id": "plain", "admin": False, "created_at": START, "weight": None},
            ],
        )

    async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
        assert turn is not None
        assert await turn.weights() == {"heavy": 3.0}
