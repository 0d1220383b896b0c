"""The dispatcher's store (jobrail.store.dispatch) on SQLite and Postgres alike: a held
job has no message until a pass releases it, one holder at a time has a queue's lease,
and a pass that does not commit releases nothing."""

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.jobs.domain import Job, JobStatus
from jobrail.kernel.ids import JobId, TenantId
from jobrail.settings import DatabaseSettings
from jobrail.store.jobs import SqlaJobRepository, SqlaJobStore
from jobrail.store.pauses import SqlaPauses
from jobrail.store.pg_job_store import PgJobStore
from jobrail.store.pg_pool import create_pool
from jobrail.store.tables import dispatch_arrivals, jobs, outbox, tenants
from tests.fakes import START, make_job
from tests.support.dispatch_store import Subject, held

LEASE = timedelta(seconds=3)


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
        assert sorted(await turn.arrivals()) == [("a", ""), ("b", "")]
        assert await turn.arrivals() == []  # taken
        assert sorted(await turn.lines()) == [("a", ""), ("b", "")]
        heads = await turn.heads({("a", ""): 2, ("b", ""): 5, ("nobody", ""): 1})
    assert heads == {("a", ""): [a[0].id, a[1].id], ("b", ""): [b[0].id], ("nobody", ""): []}
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
            assert await turn.arrivals() == [("acme", "")]
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


async def test_a_pause_holds_the_scope_s_jobs_again_and_the_claim_refuses_them(
    subject: Subject,
) -> None:
    pauses = SqlaPauses(subject.engine)
    released = await subject.add(make_job(tenant_id=TenantId("a")))  # a message on its way
    other = await subject.add(make_job(tenant_id=TenantId("b")))
    store = SqlaJobStore(subject.engine)

    pause, recalled = await pauses.pause("tenant", "a", START)
    again, _ = await pauses.pause("tenant", "a", START + timedelta(seconds=5))

    assert (pause.scope, pause.value, pause.paused_at, recalled) == ("tenant", "a", START, 1)
    assert again.paused_at == START  # paused already: the first pause stands
    refused = await store.claim(released.id, START, LEASE)
    assert refused.job is None
    assert refused.current is not None
    assert refused.current.is_held  # its message is dropped; the dispatcher releases it
    assert await pauses.pause_of(refused.current) == pause
    assert (await store.claim(other.id, START, LEASE)).job is not None
    assert [p.value for p in await pauses.pauses()] == ["a"]

    assert await pauses.resume("tenant", "a")
    assert not await pauses.resume("tenant", "a")
    assert await subject.count(dispatch_arrivals, dispatch_arrivals.c.tenant_id == "a") == 1
    async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
        assert turn is not None
        assert [j.id for j in await turn.release([released.id], START)] == [released.id]


@pytest.mark.parametrize("scope", ["queue", "type"])
async def test_a_paused_queue_or_type_is_neither_claimed_nor_released(
    subject: Subject, scope: str
) -> None:
    pauses = SqlaPauses(subject.engine)
    job = held()
    await subject.add(job)
    await pauses.pause(scope, job.queue if scope == "queue" else job.type, START)

    async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
        assert turn is not None
        assert await turn.heads({("acme", ""): 5}) == {("acme", ""): []}
        assert await turn.release([job.id], START) == []
    async with subject.engine.begin() as conn:  # as a release from before the pause
        await conn.execute(jobs.update().values(held_since=None))
    assert (await SqlaJobStore(subject.engine).claim(job.id, START, LEASE)).job is None


@pytest.mark.parametrize("subject", ["postgres"], indirect=True)
@pytest.mark.parametrize("commits", [True, False], ids=["released", "rolled-back"])
async def test_a_claim_that_meets_a_release_under_way_waits_for_its_end(
    subject: Subject, commits: bool
) -> None:
    # A release publishes before it commits: a worker may claim the job in between.
    job = held()
    await subject.add(job)
    pool = await create_pool(DatabaseSettings(url=subject.engine.url.render_as_string(False)))
    store = PgJobStore(pool)
    released = asyncio.Event()
    claimed = asyncio.Event()

    async def release() -> None:
        async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
            assert turn is not None
            assert len(await turn.release([job.id], START)) == 1
            released.set()
            await claimed.wait()  # the claim is under way: now end the release
            if not commits:
                raise RuntimeError("a publish was not confirmed")

    try:
        releasing = asyncio.create_task(release())
        await released.wait()
        claim = asyncio.create_task(store.claim(job.id, START, LEASE))
        await asyncio.sleep(0.1)  # let it reach the database (it waits either way)
        claimed.set()
        with contextlib.suppress(RuntimeError):
            await releasing
        result = await claim
    finally:
        await pool.close()

    if commits:
        assert result.job is not None, result.current
        assert result.job.status is JobStatus.RUNNING
    else:
        assert result.job is None
        assert result.current is not None
        assert result.current.is_held  # its message is dropped; the next pass releases it


@pytest.mark.parametrize("subject", ["postgres"], indirect=True)
async def test_a_claim_whose_release_commits_before_it_reads_the_job_again_starts_it(
    subject: Subject,
) -> None:
    # The other order: the claim saw the job held, then the release committed, and
    # only then did the worker read the job. It starts it now, not a second later.
    job = held()
    await subject.add(job)
    pool = await create_pool(DatabaseSettings(url=subject.engine.url.render_as_string(False)))

    class ReleasedMeanwhile(PgJobStore):
        async def get(self, job_id: JobId) -> Job | None:
            async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
                assert turn is not None
                await turn.release([job_id], START)
            return await super().get(job_id)

    try:
        result = await ReleasedMeanwhile(pool).claim(job.id, START, LEASE)
    finally:
        await pool.close()

    assert result.job is not None, result.current
    assert result.job.status is JobStatus.RUNNING


@pytest.mark.parametrize("subject", ["postgres"], indirect=True)
async def test_a_pass_that_takes_a_tenant_s_note_sees_the_job_that_wrote_it_again(
    subject: Subject,
) -> None:
    # The note is there already (an earlier job); a host's transaction holds another
    # job of the tenant, not committed yet, when a pass takes the notes.
    await subject.add(held("b"))
    async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
        assert turn is not None
        assert await turn.arrivals() == [("b", "")]
        await turn.release((await turn.heads({("b", ""): 1}))["b", ""], START)
    await subject.add(held("b", now=START + timedelta(seconds=1)))  # a fresh note
    late = held("b", now=START + timedelta(seconds=2))
    entered = asyncio.Event()
    seen: dict[str, list[Any]] = {}

    async def pass_() -> None:
        entered.set()
        async with subject.store.turn("jobs.default", "x", START, LEASE) as turn:
            assert turn is not None
            seen["arrivals"] = await turn.arrivals()  # waits for the host's transaction
            seen["heads"] = (await turn.heads({("b", ""): 5}))["b", ""]

    async with AsyncSession(subject.engine) as session:
        await SqlaJobRepository(session).add(late)
        passing = asyncio.create_task(pass_())
        await entered.wait()
        await asyncio.sleep(0.1)  # the pass reaches the notes (and waits) before the commit
        await session.commit()
    await passing

    assert seen["arrivals"] == [("b", "")]
    assert late.id in seen["heads"]
