"""Dead letters by job: a redrive removes the letters of the failure it redrives and of
earlier ones, never a later one; a redrive of the DLQ removes stale letters instead of
reporting them; purges by job, type and reason. Over the in-memory DLQ of the embedded
broker and the fake unit of work."""

from datetime import datetime, timedelta

import pytest

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.messages import DeadLetterMessage, JobMessage
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import JobId
from jobrail.ops.dead_letters import (
    PurgeDeadLetters,
    PurgeDeadLettersCommand,
    RedriveDeadLetters,
    RedriveDeadLettersCommand,
)
from jobrail.ops.redrive import CLEAN_UP_LIMIT, NOT_SCANNED, RedriveJob, RedriveJobCommand
from jobrail.settings import RabbitSettings
from jobrail.transport.codec import Envelope, dead_letter, encode
from jobrail.transport.embedded_broker import EmbeddedJobBroker
from tests.fakes import NO_TYPES, FakeDeadLetterQueue, FakeUnitOfWork, FixedClock, make_job


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def uow() -> FakeUnitOfWork:
    return FakeUnitOfWork()


@pytest.fixture
def dlq() -> EmbeddedJobBroker:
    return EmbeddedJobBroker(RabbitSettings())


def failed_job(uow: FakeUnitOfWork, clock: FixedClock, **overrides: object) -> Job:
    job = make_job(**overrides)
    job.start(clock.now(), timedelta(seconds=30))
    job.fail("boom", clock.now())
    uow.store[job.id] = job
    return job


def letter_of(job: Job, failed_at: datetime | None, reason: str = "boom") -> Envelope:
    """The dead letter the runner makes for a failure of `job` that ended at `failed_at`."""
    message = JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id="t")
    return encode(
        DeadLetterMessage(
            message=message,
            reason=reason,
            source_queue=job.queue,
            dead_letter_queue="jobs.dlq",
            at=failed_at or datetime.now().astimezone(),
            job_failed_at=failed_at,
        )
    )


async def ids_in(dlq: EmbeddedJobBroker) -> list[str]:
    return [letter.id for letter in await dlq.peek_dead_letters(100)]


async def test_a_dead_letter_is_listed_under_the_id_of_the_message_that_died(
    uow: FakeUnitOfWork, clock: FixedClock, dlq: EmbeddedJobBroker
) -> None:
    job = failed_job(uow, clock)
    letter = letter_of(job, job.finished_at)
    await dlq.publish(letter)

    [listed] = await dlq.peek_dead_letters(10)

    assert listed.id == letter.message_id != str(letter.id)
    assert listed.job_id == job.id
    assert listed.job_failed_at == job.finished_at


async def test_redriving_a_job_removes_the_letters_of_that_failure_and_earlier_ones_only(
    uow: FakeUnitOfWork, clock: FixedClock, dlq: EmbeddedJobBroker
) -> None:
    job = failed_job(uow, clock)
    assert job.finished_at is not None
    other = failed_job(uow, clock)
    earlier = letter_of(job, job.finished_at - timedelta(minutes=5))
    current = letter_of(job, job.finished_at)
    duplicate = letter_of(job, job.finished_at)  # published twice (the relay)
    later = letter_of(job, job.finished_at + timedelta(seconds=1))  # a failure after
    refused = dead_letter(  # a message naming the job, refused: not a failure of it
        body=current.body,
        reason="tenant mismatch",
        source_queue="jobs.default",
        dead_letter_queue="jobs.dlq",
        at=clock.now(),
    )
    for envelope in (
        earlier,
        letter_of(other, other.finished_at),
        current,
        duplicate,
        later,
        refused,
    ):
        await dlq.publish(envelope)
    kept_before = await ids_in(dlq)

    redriven = await RedriveJob(uow, clock, dlq, NO_TYPES)(RedriveJobCommand(None, job.id))

    assert redriven.job.status is JobStatus.PENDING
    assert redriven.dead_letters.removed == 3
    gone = {earlier.message_id, current.message_id, duplicate.message_id}
    assert await ids_in(dlq) == [i for i in kept_before if i not in gone]


async def test_a_dlq_redrive_redrives_the_current_letter_and_removes_stale_ones(
    uow: FakeUnitOfWork, clock: FixedClock, dlq: EmbeddedJobBroker
) -> None:
    job = failed_job(uow, clock)
    assert job.finished_at is not None
    redriven_since = failed_job(uow, clock)
    redriven_since.redrive(clock.now())  # by POST /jobs/{id}/redrive, its letter left behind
    stale = letter_of(job, job.finished_at - timedelta(minutes=5))
    current = letter_of(job, job.finished_at)
    duplicate = letter_of(job, job.finished_at)
    left_behind = letter_of(redriven_since, clock.now() - timedelta(minutes=1))
    for envelope in (stale, left_behind, current, duplicate):
        await dlq.publish(envelope)
    await dlq.publish(Envelope(queue="jobs.dlq", body=b"poison"))
    redrive = RedriveDeadLetters(dlq, RedriveJob(uow, clock, dlq, NO_TYPES))

    outcomes = await redrive(RedriveDeadLettersCommand())

    by_id = {o.id: o.outcome for o in outcomes}
    assert by_id[stale.message_id] == "removed"
    assert by_id[left_behind.message_id] == "removed"
    assert by_id[current.message_id] == "redriven"
    assert by_id[duplicate.message_id] == "removed"
    assert sorted(by_id.values()).count("kept") == 1  # the poison message
    assert uow.store[job.id].status is JobStatus.PENDING
    assert len(uow.published) == 1  # one redrive, one new message
    assert [letter.preview for letter in await dlq.peek_dead_letters(10)] == ["poison"]


async def test_a_redrive_by_id_also_removes_the_jobs_older_letters(
    uow: FakeUnitOfWork, clock: FixedClock, dlq: EmbeddedJobBroker
) -> None:
    job = failed_job(uow, clock)
    assert job.finished_at is not None
    current = letter_of(job, job.finished_at)
    stale = letter_of(job, job.finished_at - timedelta(minutes=5))
    for envelope in (current, stale):
        await dlq.publish(envelope)
    redrive = RedriveDeadLetters(dlq, RedriveJob(uow, clock, dlq, NO_TYPES))

    outcomes = await redrive(RedriveDeadLettersCommand(ids=frozenset({current.message_id})))

    assert [(o.id, o.outcome) for o in outcomes] == [(current.message_id, "redriven")]
    assert await ids_in(dlq) == []


async def test_purges_by_job_type_reason_and_all(
    uow: FakeUnitOfWork, clock: FixedClock, dlq: EmbeddedJobBroker
) -> None:
    a = failed_job(uow, clock, type="demo.echo")
    b = failed_job(uow, clock, type="demo.echo")
    c = failed_job(uow, clock, type="test.other")
    for job, reason in ((a, "timed out after 5s"), (b, "permanent error: no"), (c, "boom")):
        await dlq.publish(letter_of(job, job.finished_at, reason))
    await dlq.publish(Envelope(queue="jobs.dlq", body=b"poison"))
    purge = PurgeDeadLetters(dlq)

    by_job = await purge(PurgeDeadLettersCommand(job_id=JobId(a.id)))
    by_reason = await purge(PurgeDeadLettersCommand(reason="permanent"))
    by_type_none_left = await purge(PurgeDeadLettersCommand(job_type="demo.echo"))
    by_type = await purge(PurgeDeadLettersCommand(job_type="test.other", reason="boom"))
    left = await dlq.peek_dead_letters(10)
    everything = await purge(PurgeDeadLettersCommand(all=True))

    assert [p.purged for p in (by_job, by_reason, by_type_none_left, by_type)] == [1, 1, 0, 1]
    assert all(p.complete for p in (by_job, by_reason, by_type))
    assert [letter.preview for letter in left] == ["poison"]
    assert everything.purged == 1
    assert await ids_in(dlq) == []
    with pytest.raises(InvalidInputError):
        await purge(PurgeDeadLettersCommand())
    with pytest.raises(InvalidInputError):
        await purge(PurgeDeadLettersCommand(all=True, reason="x"))


async def test_a_dlq_without_its_delivery_limit_is_not_looked_through_by_job_redrives(
    uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    # An older DLQ kept as it was: on RabbitMQ 4 a letter goes after 20 returns.
    dlq = FakeDeadLetterQueue(safe_to_scan=False, delivery_limit=20)
    waiting = failed_job(uow, clock)
    await dlq.publish(letter_of(waiting, waiting.finished_at))
    redrive = RedriveJob(uow, clock, dlq, NO_TYPES)

    answers = [await redrive(RedriveJobCommand(None, failed_job(uow, clock).id)) for _ in range(25)]

    assert dlq.looks == 0
    assert len(dlq.letters) == 1  # the other job's letter is still there
    assert {a.dead_letters.note for a in answers} == {NOT_SCANNED}
    assert all(a.job.status is JobStatus.PENDING for a in answers)


async def test_a_redrive_by_id_leaves_an_unsafe_dlq_alone_after_its_own_pass(
    uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    dlq = FakeDeadLetterQueue(safe_to_scan=False, delivery_limit=20)
    job = failed_job(uow, clock)
    current = letter_of(job, job.finished_at)
    other = failed_job(uow, clock)
    for envelope in (current, letter_of(other, other.finished_at)):
        await dlq.publish(envelope)

    outcomes = await RedriveDeadLetters(dlq, RedriveJob(uow, clock, dlq, NO_TYPES))(
        RedriveDeadLettersCommand(ids=frozenset({current.message_id}))
    )

    assert [o.outcome for o in outcomes] == ["redriven"]
    assert dlq.looks == 2  # the operator's own pass; no clean-up pass after it
    assert len(dlq.letters) == 1


async def test_a_job_redrive_looks_through_a_bounded_part_of_a_safe_dlq(
    uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    dlq = FakeDeadLetterQueue(safe_to_scan=True)
    others = [failed_job(uow, clock) for _ in range(3)]
    for n in range(CLEAN_UP_LIMIT + 50):
        other = others[n % 3]
        await dlq.publish(letter_of(other, other.finished_at))
    job = failed_job(uow, clock)
    await dlq.publish(letter_of(job, job.finished_at))  # beyond the limit: left for later

    done = await RedriveJob(uow, clock, dlq, NO_TYPES)(RedriveJobCommand(None, job.id))

    assert dlq.looks == CLEAN_UP_LIMIT
    assert done.dead_letters.removed == 0
    assert len(dlq.letters) == CLEAN_UP_LIMIT + 51
    assert f"of the first {CLEAN_UP_LIMIT}" in done.dead_letters.note
