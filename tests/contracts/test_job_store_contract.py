"""The worker's job store: the fake and the SQL store (SQLite and Postgres) behave the same."""

import asyncio
import copy
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from jobrail.cli.schema import migrate
from jobrail.jobs.domain import Job, JobStatus, Wait, WaitsOn
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.progress import JobProgress
from jobrail.settings import DatabaseSettings, Settings
from jobrail.store.jobs import SqlaJobIntake, SqlaJobRepository, SqlaJobStore
from jobrail.store.pg_intake import PgJobIntake
from jobrail.store.pg_job_store import PgJobStore
from jobrail.store.pg_pool import create_pool
from jobrail.store.tables import outbox
from jobrail.worker.job_store import JobIdentity, WaitNote
from tests.fakes import START, FakeJobStore, make_job
from tests.support.services import require, store_engine

LEASE = timedelta(seconds=30)


class StoreUnderTest:
    """A job store plus a way to put jobs into it and read them back."""

    def __init__(self, store: Any, put: Any, read: Any, outbox_count: Any) -> None:
        self.store, self.put, self.read, self.outbox_count = store, put, read, outbox_count


@pytest.fixture(params=["fake", "sqlite", "postgres"])
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    if request.param == "fake":
        fake = FakeJobStore()

        async def put(job: Job) -> None:
            fake.jobs[job.id] = copy.deepcopy(job)

        async def read(job: Job) -> Job:
            return copy.deepcopy(fake.jobs[job.id])

        async def count() -> int:
            return len(fake.outbox)

        yield StoreUnderTest(fake, put, read, count)
        return
    engine = await store_engine(request, tmp_path, "jobs, outbox, inbox")

    from sqlalchemy.ext.asyncio import AsyncSession

    async def put_sql(job: Job) -> None:
        async with AsyncSession(engine) as session:
            repository = SqlaJobRepository(session)
            if await repository.get(job.id) is None:
                await repository.add(job)
            else:
                await repository.save(job)
            await session.commit()

    async def read_sql(job: Job) -> Job:
        async with AsyncSession(engine) as session:
            found = await SqlaJobRepository(session).get(job.id)
        assert found is not None
        return found

    async def count_sql() -> int:
        async with engine.connect() as conn:
            return len((await conn.execute(select(outbox.c.id))).all())

    if request.param == "sqlite":
        yield StoreUnderTest(SqlaJobStore(engine), put_sql, read_sql, count_sql)
    else:
        pool = await create_pool(DatabaseSettings(url=engine.url.render_as_string(False)))
        yield StoreUnderTest(PgJobStore(pool), put_sql, read_sql, count_sql)
        await pool.close()
    await engine.dispose()


async def test_claim_starts_a_pending_job(subject: StoreUnderTest) -> None:
    job = make_job()
    await subject.put(job)

    claimed = await subject.store.claim(job.id, START, LEASE)

    assert claimed.job is not None
    assert claimed.job.status is JobStatus.RUNNING
    assert claimed.job.attempts == 1
    assert claimed.job.lease_until == START + LEASE
    assert (await subject.read(job)).status is JobStatus.RUNNING


async def test_only_one_of_two_claims_wins(subject: StoreUnderTest) -> None:
    job = make_job()
    await subject.put(job)

    first = await subject.store.claim(job.id, START, LEASE)
    second = await subject.store.claim(job.id, START, LEASE)

    assert first.job is not None
    assert second.job is None
    assert second.current is not None
    assert second.current.status is JobStatus.RUNNING


async def test_a_claim_naming_another_tenant_or_type_leaves_the_job_alone(
    subject: StoreUnderTest,
) -> None:
    job = make_job(tenant_id="acme")
    await subject.put(job)

    other_tenant = await subject.store.claim(job.id, START, LEASE, JobIdentity("globex", job.type))
    other_type = await subject.store.claim(job.id, START, LEASE, JobIdentity("acme", "x.other"))
    right = await subject.store.claim(job.id, START, LEASE, JobIdentity("acme", job.type))

    assert other_tenant.job is None
    assert other_type.job is None
    assert other_tenant.current is not None
    assert other_tenant.current.tenant_id == "acme"
    assert other_tenant.current.status is JobStatus.PENDING
    assert right.job is not None
    assert right.job.attempts == 1


async def test_a_missing_job_cannot_be_claimed(subject: StoreUnderTest) -> None:
    result = await subject.store.claim(make_job().id, START, LEASE)

    assert result.job is None
    assert result.current is None


async def test_a_job_is_not_claimed_before_it_is_due(subject: StoreUnderTest) -> None:
    job = make_job(run_after=START + timedelta(seconds=10))
    await subject.put(job)

    early = await subject.store.claim(job.id, START, LEASE)
    due = await subject.store.claim(job.id, START + timedelta(seconds=10), LEASE)

    assert early.job is None
    assert due.job is not None


async def test_an_expired_lease_can_be_taken_over(subject: StoreUnderTest) -> None:
    job = make_job()
    await subject.put(job)
    await subject.store.claim(job.id, START, LEASE)

    before = await subject.store.claim(job.id, START + LEASE - timedelta(seconds=1), LEASE)
    after = await subject.store.claim(job.id, START + LEASE, LEASE)

    assert before.job is None
    assert after.job is not None
    assert after.job.attempts == 2


async def test_record_writes_the_outcome_and_its_messages(subject: StoreUnderTest) -> None:
    from jobrail.jobs.messages import JobMessage

    job = make_job()
    await subject.put(job)
    claimed = (await subject.store.claim(job.id, START, LEASE)).job
    assert claimed is not None
    claimed.fail("boom", START)
    message = JobMessage(job_id=job.id, job_type=job.type, queue="jobs.dlq", tenant_id="acme")

    assert await subject.store.record(claimed, ClaimToken.of(claimed), [message])

    stored = await subject.read(job)
    assert stored.status is JobStatus.FAILED
    assert stored.last_error == "boom"
    assert await subject.outbox_count() == 1


async def test_record_from_a_taken_over_attempt_is_refused(subject: StoreUnderTest) -> None:
    job = make_job()
    await subject.put(job)
    stale = (await subject.store.claim(job.id, START, LEASE)).job
    assert stale is not None
    token = ClaimToken.of(stale)
    await subject.store.claim(job.id, START + LEASE, LEASE)
    stale.succeed({"late": True}, START + LEASE)

    assert not await subject.store.record(stale, token, [])

    stored = await subject.read(job)
    assert stored.status is JobStatus.RUNNING
    assert stored.attempts == 2
    assert await subject.outbox_count() == 0


async def test_record_keeps_a_cancel_request_made_while_running(subject: StoreUnderTest) -> None:
    job = make_job()
    await subject.put(job)
    claimed = (await subject.store.claim(job.id, START, LEASE)).job
    assert claimed is not None
    running = await subject.read(job)
    running.cancel(START)
    await subject.put(running)

    assert await subject.store.cancel_requested(job.id)
    claimed.retry_later("down", START + LEASE, START)
    assert await subject.store.record(claimed, ClaimToken.of(claimed), [])

    assert (await subject.read(job)).cancel_requested


async def test_progress_is_written_only_for_the_claim_that_holds_the_job(
    subject: StoreUnderTest,
) -> None:
    job = make_job()
    await subject.put(job)
    first = (await subject.store.claim(job.id, START, LEASE)).job
    assert first is not None
    token = ClaimToken.of(first)
    halfway = JobProgress(2.5, 5, "rows", START + timedelta(seconds=1))

    assert await subject.store.write_progress(job.id, token, halfway)
    assert (await subject.read(job)).progress == halfway
    assert (await subject.store.get(job.id)).progress == halfway  # type: ignore[union-attr]
    # Its lease ends; another worker takes the job over (and sees the progress so far):
    # the first attempt's progress no longer lands.
    taken = (await subject.store.claim(job.id, START + 2 * LEASE, LEASE)).job
    assert taken is not None
    assert taken.progress == halfway
    late = JobProgress(5, 5, None, START + 2 * LEASE)
    assert not await subject.store.write_progress(job.id, token, late)
    assert (await subject.read(job)).progress == halfway
    # The outcome keeps the progress the attempt wrote; after it, none lands.
    done = JobProgress(7, None, None, START + 2 * LEASE)
    assert await subject.store.write_progress(job.id, ClaimToken.of(taken), done)
    taken.succeed({}, START + 2 * LEASE)
    assert await subject.store.record(taken, ClaimToken.of(taken), [])
    assert not await subject.store.write_progress(job.id, ClaimToken.of(taken), late)
    stored = await subject.read(job)
    assert stored.status is JobStatus.SUCCEEDED
    assert stored.progress == done
    assert not await subject.store.write_progress(make_job().id, token, late)


@pytest.fixture(params=["fake", "sqlite", "postgres"])
async def intake(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A JobIntake (the store under the intake EnqueueJob uses, which encodes the
    message once for the store and the fast path), and a way to count the messages it
    stored."""
    from jobrail.outbox.committing import RecordingIntake
    from tests.fakes import FakeJobIntake

    if request.param == "fake":
        fake = FakeJobIntake({})
        yield RecordingIntake(fake), lambda: _count(len(fake.messages))
        return
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/intake.db"
        await asyncio.to_thread(migrate, Settings(database={"url": url}))  # type: ignore[arg-type]
    else:
        require("postgres")
        url = request.getfixturevalue("database_url")
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM outbox"))
        await conn.execute(text("DELETE FROM jobs"))

    async def messages() -> int:
        async with engine.connect() as conn:
            return len((await conn.execute(select(outbox.c.id))).all())

    if request.param == "sqlite":
        from sqlalchemy.ext.asyncio import async_sessionmaker

        sessions = async_sessionmaker(engine, expire_on_commit=False)
        yield RecordingIntake(SqlaJobIntake(sessions)), messages
    else:
        pool = await create_pool(DatabaseSettings(url=engine.url.render_as_string(False)))
        yield RecordingIntake(PgJobIntake(pool)), messages
        await pool.close()
    await engine.dispose()


async def _count(value: int) -> int:
    return value


async def test_intake_stores_a_job_with_its_message(intake: Any) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    job = make_job(idempotency_key="k")
    message = JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="acme")

    stored = await store.add(job, message)

    assert stored.id == job.id
    assert await messages() == 1


async def test_intake_returns_the_first_job_for_a_repeated_key_and_stores_no_message(
    intake: Any,
) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    first = make_job(idempotency_key="same", payload={"n": 1})
    second = make_job(idempotency_key="same", payload={"n": 1})
    for job in (first, second):
        await store.add(
            job, JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="acme")
        )

    again = await store.add(
        second,
        JobMessage(job_id=second.id, job_type=second.type, queue="jobs.default", tenant_id="acme"),
    )

    assert again.id == first.id
    assert again.payload == {"n": 1}
    assert await messages() == 1


async def test_a_late_outcome_after_a_redrive_does_not_overwrite_the_new_run(
    subject: StoreUnderTest,
) -> None:
    job = make_job()
    await subject.put(job)
    stale = (await subject.store.claim(job.id, START, LEASE)).job
    assert stale is not None
    token = ClaimToken.of(stale)
    # It fails elsewhere, is redriven and claimed again: attempt 1 once more.
    current = await subject.read(job)
    current.fail("boom", START)
    current.redrive(START + LEASE)
    await subject.put(current)
    rerun = (await subject.store.claim(job.id, START + 2 * LEASE, LEASE)).job
    assert rerun is not None
    assert rerun.attempts == token.attempt
    stale.succeed({"late": True}, START + 2 * LEASE)

    assert not await subject.store.record(stale, token, [])
    assert (await subject.read(job)).result is None


async def test_a_lease_is_extended_only_for_the_claim_that_holds_it(
    subject: StoreUnderTest,
) -> None:
    job = make_job()
    await subject.put(job)
    first = (await subject.store.claim(job.id, START, LEASE)).job
    assert first is not None
    token = ClaimToken.of(first)

    assert await subject.store.extend_lease(job.id, token, START + 3 * LEASE)
    assert (await subject.read(job)).lease_until == START + 3 * LEASE
    # Its lease ends; another worker takes the job over: the first cannot extend it.
    taken = (await subject.store.claim(job.id, START + 4 * LEASE, LEASE)).job
    assert taken is not None
    assert not await subject.store.extend_lease(job.id, token, START + 9 * LEASE)
    assert (await subject.read(job)).lease_until == START + 5 * LEASE
    # Nor can anyone once the job has ended.
    taken.succeed({}, START + 4 * LEASE)
    assert await subject.store.record(taken, ClaimToken.of(taken), [])
    assert not await subject.store.extend_lease(job.id, ClaimToken.of(taken), START + 9 * LEASE)
    assert not await subject.store.extend_lease(make_job().id, token, START)


async def test_claims_and_records_made_together_share_a_statement_with_the_same_rules(
    database_url: str,
) -> None:
    """The Postgres store batches calls made in the same moment; each keeps its answer."""
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE jobs, outbox, inbox CASCADE"))
    pool = await create_pool(DatabaseSettings(url=database_url))
    store = PgJobStore(pool, window_s=0.005)
    jobs_ = [make_job() for _ in range(6)]
    async with AsyncSession(engine) as session:
        for job in jobs_:
            await SqlaJobRepository(session).add(job)
        await session.commit()
    ids = [job.id for job in jobs_]

    # Every job asked for once, and the first one twice, in the same moment; and the
    # last one by a message naming another tenant.
    forged = await asyncio.gather(
        store.claim(ids[-1], START, LEASE, JobIdentity("someone-else", jobs_[-1].type)),
        store.claim(ids[-1], START, LEASE, JobIdentity(jobs_[-1].tenant_id, "x.other")),
    )
    assert [f.job for f in forged] == [None, None]
    claims = await asyncio.gather(
        *(
            store.claim(i, START, LEASE, JobIdentity(j.tenant_id, j.type))
            for i, j in zip([*ids, ids[0]], [*jobs_, jobs_[0]], strict=True)
        )
    )

    claimed = [c.job for c in claims if c.job is not None]
    assert sorted(j.id for j in claimed) == sorted(ids)
    assert claims[-1].job is None
    assert claims[-1].current is not None
    assert claims[-1].current.status is JobStatus.RUNNING
    tokens = [ClaimToken.of(job) for job in claimed]
    for job in claimed:
        job.succeed({"n": 1}, START)
    stale = claimed[0]
    await store.claim(stale.id, START + LEASE, LEASE)  # taken over before its record

    written = await asyncio.gather(
        *(store.record(job, token, []) for job, token in zip(claimed, tokens, strict=True))
    )

    assert written == [job.id != stale.id for job in claimed]
    async with engine.connect() as conn:
        statuses = dict(
            (await conn.execute(text("SELECT id, status FROM jobs"))).all()  # type: ignore[arg-type]
        )
    assert [statuses[i] for i in ids] == ["running" if i == stale.id else "succeeded" for i in ids]
    await pool.close()
    await engine.dispose()


async def test_progress_writes_made_together_share_a_statement_with_the_same_fence(
    database_url: str,
) -> None:
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE jobs, outbox, inbox CASCADE"))
    pool = await create_pool(DatabaseSettings(url=database_url))
    store = PgJobStore(pool, window_s=0.005)
    jobs_ = [make_job() for _ in range(4)]
    async with AsyncSession(engine) as session:
        for job in jobs_:
            await SqlaJobRepository(session).add(job)
        await session.commit()
    claimed = [(await store.claim(job.id, START, LEASE)).job for job in jobs_]
    tokens = [ClaimToken.of(job) for job in claimed if job is not None]
    stale = jobs_[0].id
    await store.claim(stale, START + LEASE, LEASE)  # taken over before it reports

    written = await asyncio.gather(
        *(
            store.write_progress(job.id, token, JobProgress(n, 10, f"job {n}", START))
            for n, (job, token) in enumerate(zip(jobs_, tokens, strict=True))
        )
    )

    assert written == [False, True, True, True]
    async with AsyncSession(engine) as session:
        stored = [await SqlaJobRepository(session).get(job.id) for job in jobs_]
    assert [job.progress.message if job and job.progress else None for job in stored] == [
        None,
        "job 1",
        "job 2",
        "job 3",
    ]
    await pool.close()
    await engine.dispose()


async def test_intake_adds_made_together_each_store_their_job_and_message(intake: Any) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    jobs_ = [make_job(payload={"n": n}) for n in range(20)]

    stored = await asyncio.gather(
        *(
            store.add(
                job, JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="a")
            )
            for job in jobs_
        )
    )

    assert [job.id for job in stored] == [job.id for job in jobs_]
    assert await messages() == 20


async def test_intake_adds_made_together_with_one_key_store_one_job_and_one_message(
    intake: Any,
) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    jobs_ = [make_job(idempotency_key="together", payload={"n": 1}) for _ in range(5)]

    stored = await asyncio.gather(
        *(
            store.add(
                job, JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="a")
            )
            for job in jobs_
        )
    )

    assert len({job.id for job in stored}) == 1
    assert stored[0].id in {job.id for job in jobs_}
    assert await messages() == 1


# -- what deferred jobs wait for -------------------------------------------------------


def _wait(at: Any, seconds: float = 5) -> Wait:
    return Wait(
        on=(WaitsOn("lock", "lock", "report:acme:r-1"), WaitsOn("rate_limit", "vendor", "v:acme")),
        until=at + timedelta(seconds=seconds),
        since=at,
    )


async def test_notes_of_many_jobs_are_written_and_read_back(subject: StoreUnderTest) -> None:
    first, second = make_job(), make_job()
    await subject.put(first)
    await subject.put(second)
    later = START + timedelta(seconds=1)

    await subject.store.note_waits(
        [WaitNote(first.id, _wait(later), later), WaitNote(second.id, _wait(later, 9), later)]
    )

    assert (await subject.read(first)).waiting == _wait(later)
    assert (await subject.read(second)).waiting == _wait(later, 9)


async def test_a_note_on_a_job_that_started_or_changed_since_is_dropped(
    subject: StoreUnderTest,
) -> None:
    started, changed = make_job(), make_job()
    await subject.put(started)
    await subject.put(changed)
    noted_at = START + timedelta(seconds=1)
    assert (await subject.store.claim(started.id, START + timedelta(seconds=2), LEASE)).job
    changed.cancel_requested = False
    changed.updated_at = START + timedelta(seconds=3)  # e.g. a retry recorded after the note
    await subject.put(changed)

    await subject.store.note_waits(
        [
            WaitNote(started.id, _wait(noted_at), noted_at),
            WaitNote(changed.id, _wait(noted_at), noted_at),
        ]
    )

    assert (await subject.read(started)).waiting is None
    assert (await subject.read(changed)).waiting is None


async def test_a_claim_clears_what_the_job_waited_for(subject: StoreUnderTest) -> None:
    job = make_job()
    await subject.put(job)
    noted_at = START + timedelta(seconds=1)
    await subject.store.note_waits([WaitNote(job.id, _wait(noted_at), noted_at)])

    claimed = (await subject.store.claim(job.id, START + timedelta(seconds=6), LEASE)).job

    assert claimed is not None
    assert claimed.waiting is None
    assert (await subject.read(job)).waiting is None


# -- deadlines ----------------------------------------------------------------------------


async def test_no_attempt_starts_at_or_after_the_deadline_and_the_job_expires(
    subject: StoreUnderTest,
) -> None:
    job = make_job(deadline=START + timedelta(seconds=10))
    await subject.put(job)
    deadline = START + timedelta(seconds=10)

    early = await subject.store.expire(job.id, deadline - timedelta(seconds=1))
    late_claim = await subject.store.claim(job.id, deadline, LEASE)
    expired = await subject.store.expire(job.id, deadline)
    again = await subject.store.expire(job.id, deadline + timedelta(seconds=1))

    assert early is None
    assert late_claim.job is None
    assert late_claim.current is not None
    assert late_claim.current.status is JobStatus.PENDING
    assert expired is not None
    assert expired.status is JobStatus.EXPIRED
    stored = await subject.read(job)
    assert stored.status is JobStatus.EXPIRED
    assert stored.attempts == 0  # it never ran
    assert stored.started_at is None
    assert stored.finished_at == deadline
    assert stored.last_error == "not started by its deadline"
    assert again is None  # ended: nothing to expire


async def test_a_job_claimed_before_its_deadline_runs_and_is_not_expired_while_held(
    subject: StoreUnderTest,
) -> None:
    job = make_job(deadline=START + timedelta(seconds=10))
    await subject.put(job)

    claimed = await subject.store.claim(job.id, START, LEASE)
    held = await subject.store.expire(job.id, START + timedelta(seconds=11))

    assert claimed.job is not None
    assert held is None
    assert (await subject.read(job)).status is JobStatus.RUNNING


async def test_a_dead_workers_job_past_its_deadline_expires_instead_of_being_taken_over(
    subject: StoreUnderTest,
) -> None:
    job = make_job(deadline=START + timedelta(seconds=10))
    await subject.put(job)
    await subject.store.claim(job.id, START, LEASE)  # its worker dies

    takeover = await subject.store.claim(job.id, START + LEASE, LEASE)
    expired = await subject.store.expire(job.id, START + LEASE)

    assert takeover.job is None
    assert expired is not None
    assert expired.status is JobStatus.EXPIRED
    assert expired.attempts == 1


# -- unique keys --------------------------------------------------------------------------


async def test_a_unique_key_returns_the_active_job_of_its_type_whatever_the_payload(
    intake: Any,
) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    first = make_job(unique_key="sync:42", payload={"n": 1})
    second = make_job(unique_key="sync:42", payload={"n": 2})
    other_type = make_job(unique_key="sync:42", type="demo.other")
    other_tenant = make_job(unique_key="sync:42", tenant_id="globex")

    def message(job: Job) -> JobMessage:
        return JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="acme")

    stored = [await store.add(job, message(job)) for job in (first, second, other_type)]
    stored.append(await store.add(other_tenant, message(other_tenant)))

    assert [job.id for job in stored] == [first.id, first.id, other_type.id, other_tenant.id]
    assert stored[1].payload == {"n": 1}
    assert await messages() == 3


async def test_unique_enqueues_made_together_store_one_job_and_one_message(intake: Any) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    jobs_ = [make_job(unique_key="together", payload={"n": n}) for n in range(5)]

    stored = await asyncio.gather(
        *(
            store.add(
                job, JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="a")
            )
            for job in jobs_
        )
    )

    assert len({job.id for job in stored}) == 1
    assert await messages() == 1


# -- debounce keys ------------------------------------------------------------------------


async def test_a_debounced_add_gives_the_pending_job_its_payload_and_stores_no_message(
    intake: Any,
) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    first = make_job(debounce_key="k", payload={"n": 1})
    later = [make_job(debounce_key="k", payload={"n": n}) for n in (2, 3)]
    other_type = make_job(debounce_key="k", type="demo.other")

    def message(job: Job) -> JobMessage:
        return JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="acme")

    stored = [await store.add(job, message(job)) for job in (first, *later, other_type)]

    assert [job.id for job in stored] == [first.id, first.id, first.id, other_type.id]
    assert stored[2].payload == {"n": 3}
    assert await messages() == 2


async def test_debounced_adds_made_together_store_one_job_with_one_of_their_payloads(
    intake: Any,
) -> None:
    from jobrail.jobs.messages import JobMessage

    store, messages = intake
    jobs_ = [make_job(debounce_key="together", payload={"n": n}) for n in range(8)]

    stored = await asyncio.gather(
        *(
            store.add(
                job, JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="a")
            )
            for job in jobs_
        )
    )

    assert len({job.id for job in stored}) == 1
    assert await messages() == 1


async def test_a_held_job_is_not_claimed_until_the_dispatcher_releases_it(
    subject: StoreUnderTest,
) -> None:
    job = make_job()
    job.hold()
    await subject.put(job)

    refused = await subject.store.claim(job.id, START, LEASE)

    assert refused.job is None
    assert refused.current is not None
    assert refused.current.is_held
    assert refused.current.held_since == job.created_at
