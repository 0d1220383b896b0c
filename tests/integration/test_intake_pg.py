"""Group commit on Postgres: enqueues made together share one statement, and each
keeps its own answer; the marks of published outbox rows ride along with it."""

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import pytest

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.errors import InvalidInputError
from jobrail.settings import DatabaseSettings
from jobrail.store.pg_intake import PgJobIntake, PgOutboxMarks, _Intake
from jobrail.store.pg_pool import create_pool
from jobrail.transport.codec import encode
from tests.fakes import START, make_job


class CountingIntake(PgJobIntake):
    statements = 0

    async def _insert(self, adds: Sequence[_Intake]) -> list[bool]:
        self.statements += 1
        return await super()._insert(adds)


@pytest.fixture
async def intake(database_url: str) -> AsyncIterator[CountingIntake]:
    pool = await create_pool(DatabaseSettings(url=database_url))  # type: ignore[arg-type]
    try:
        await pool.execute("DELETE FROM outbox")
        await pool.execute("DELETE FROM jobs")
        yield CountingIntake(pool)
    finally:
        await pool.close()


async def _add(intake: PgJobIntake, job: Job) -> Job:
    message = JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="acme")
    return await intake.add(job, encode(message))


async def test_adds_made_in_one_loop_turn_share_one_statement(intake: CountingIntake) -> None:
    jobs_ = [make_job(payload={"n": n}) for n in range(30)]

    stored = await asyncio.gather(*(_add(intake, job) for job in jobs_))

    assert [job.id for job in stored] == [job.id for job in jobs_]
    assert intake.statements == 1
    assert await intake._pool.fetchval("SELECT count(*) FROM outbox") == 30


async def test_a_row_the_server_refuses_fails_only_its_own_request(
    intake: CountingIntake,
) -> None:
    good = [make_job(payload={"n": n}) for n in range(3)]
    bad_text = make_job(entity_id="a\x00b")  # Postgres text cannot hold a NUL
    bad_json = make_job(payload={"m": "a\x00b"})  # refused before any statement

    results = await asyncio.gather(
        *(_add(intake, job) for job in [good[0], bad_text, good[1], bad_json, good[2]]),
        return_exceptions=True,
    )

    assert [r.id for r in results if isinstance(r, Job)] == [job.id for job in good]
    assert isinstance(results[3], InvalidInputError)
    assert isinstance(results[1], Exception)
    assert await intake._pool.fetchval("SELECT count(*) FROM jobs") == 3
    assert await intake._pool.fetchval("SELECT count(*) FROM outbox") == 3


async def test_a_key_reused_with_another_payload_in_one_statement_returns_the_first_job(
    intake: CountingIntake,
) -> None:
    first = make_job(idempotency_key="k", payload={"n": 1})
    other = make_job(idempotency_key="k", payload={"n": 2})

    stored = await asyncio.gather(_add(intake, first), _add(intake, other))

    # The first row of the statement wins; EnqueueJob answers the other with a 409.
    assert [job.id for job in stored] == [first.id, first.id]
    assert stored[1].payload == {"n": 1}
    assert intake.statements == 1


class CountingMarks(PgOutboxMarks):
    statements = 0

    async def _flush(self, marks: Sequence[tuple[Any, datetime]]) -> None:
        self.statements += 1
        await super()._flush(marks)


async def _unmarked(intake: PgJobIntake) -> int:
    query = "SELECT count(*) FROM outbox WHERE published_at IS NULL"
    return int(await intake._pool.fetchval(query))


async def _wait_marked(intake: PgJobIntake) -> None:
    for _ in range(500):
        if await _unmarked(intake) == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the outbox rows were never marked published")


async def test_marks_ride_along_with_the_next_enqueue_statement(
    intake: CountingIntake,
) -> None:
    marks = CountingMarks(intake._pool, delay_s=60)
    with_marks = CountingIntake(intake._pool, marks=marks)
    first = make_job()
    await _add(with_marks, first)
    (row_id,) = await intake._pool.fetchval("SELECT array_agg(id) FROM outbox")

    await marks.mark_published([row_id], START)
    await _add(with_marks, make_job())

    assert (
        await intake._pool.fetchval("SELECT published_at FROM outbox WHERE id = $1", row_id)
        == START
    )
    assert marks.statements == 0
    await marks.close()


async def test_a_mark_waits_its_own_delay_after_an_earlier_one_was_carried(
    intake: CountingIntake,
) -> None:
    # The first mark is carried by an enqueue; a second one made later still waits its
    # whole delay for the next enqueue, rather than going alone when the first one's
    # wait would have ended.
    marks = CountingMarks(intake._pool, delay_s=1.0)
    with_marks = CountingIntake(intake._pool, marks=marks)
    await _add(with_marks, make_job())
    await _add(with_marks, make_job())
    first, second = await intake._pool.fetchval("SELECT array_agg(id ORDER BY id) FROM outbox")

    await marks.mark_published([first], START)
    await _add(with_marks, make_job())  # carries the first mark
    await asyncio.sleep(0.6)
    await marks.mark_published([second], START)
    await asyncio.sleep(0.6)  # past the first mark's delay, within the second's
    await _add(with_marks, make_job())  # carries the second mark

    published = "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL"
    assert await intake._pool.fetchval(published) == 2
    assert marks.statements == 0
    await marks.close()


async def test_marks_with_no_enqueue_to_ride_along_go_on_their_own(
    intake: CountingIntake,
) -> None:
    marks = CountingMarks(intake._pool, delay_s=0.01)
    await _add(intake, make_job())
    await _add(intake, make_job())
    ids = await intake._pool.fetchval("SELECT array_agg(id) FROM outbox")

    await marks.mark_published(ids, START)

    await _wait_marked(intake)
    assert marks.statements == 1
    await marks.close()


async def test_marks_still_waiting_are_written_on_close(intake: CountingIntake) -> None:
    marks = CountingMarks(intake._pool, delay_s=60)
    await _add(intake, make_job())
    ids = await intake._pool.fetchval("SELECT array_agg(id) FROM outbox")
    await marks.mark_published(ids, START)

    await marks.close()

    assert await _unmarked(intake) == 0


async def test_marks_carried_by_a_statement_the_server_refused_are_written_later(
    intake: CountingIntake,
) -> None:
    marks = CountingMarks(intake._pool, delay_s=60)
    with_marks = CountingIntake(intake._pool, marks=marks)
    await _add(intake, make_job())
    ids = await intake._pool.fetchval("SELECT array_agg(id) FROM outbox")
    await marks.mark_published(ids, START)

    results = await asyncio.gather(
        _add(with_marks, make_job(entity_id="a\x00b")),
        _add(with_marks, make_job()),
        return_exceptions=True,
    )

    assert isinstance(results[0], Exception)
    assert isinstance(results[1], Job)
    assert await _unmarked(intake) == 1  # only the new job's row, published by nobody
    await marks.close()


async def test_a_tenant_at_its_cap_is_refused_naming_it_until_one_of_its_jobs_starts(
    intake: CountingIntake,
) -> None:
    from jobrail.kernel.errors import QueuedCapError

    pool = intake._pool
    await pool.execute("DELETE FROM api_keys WHERE tenant_id IN ('capped', 'other')")
    await pool.execute("DELETE FROM tenants WHERE id IN ('capped', 'other')")
    await pool.execute(
        "INSERT INTO tenants (id, admin, created_at, max_queued) VALUES "
        "('capped', false, now(), 2), ('other', false, now(), NULL)"
    )
    first, second = make_job(tenant_id="capped", capped=True), make_job(tenant_id="capped")
    await _add(intake, first)
    await _add(intake, second)

    with pytest.raises(QueuedCapError) as refused:
        await _add(intake, make_job(tenant_id="capped", capped=True))
    # What jobrail enqueues on the tenant's behalf (a webhook delivery) is not refused.
    on_its_behalf = await _add(intake, make_job(tenant_id="capped", capped=False))
    others = [await _add(intake, make_job(tenant_id="other", capped=True)) for _ in range(3)]
    await pool.execute(
        "UPDATE jobs SET status = 'running' WHERE id = ANY($1)", [first.id, on_its_behalf.id]
    )
    after_a_start = await _add(intake, make_job(tenant_id="capped", capped=True))

    assert refused.value.cap == 2
    assert "max_queued" in str(refused.value)
    assert len(others) == 3
    assert after_a_start.tenant_id == "capped"
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE tenant_id = 'capped'") == 4
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 7
