"""A job's deadline: no attempt starts at or after it; a job still waiting then ends
expired, never run (the runner and the domain, on the fake store)."""

from datetime import timedelta

import pytest

from jobrail.jobs.domain import TERMINAL_STATUSES, IllegalTransitionError, JobStatus
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.errors import InvalidInputError
from jobrail.limits.model import JobLimits
from jobrail.transport.codec import decode, encode
from jobrail.worker.runner import JobRun
from tests.fakes import START, make_job
from tests.unit.test_runner import ACCOUNT_LOCK, ONE_PER_MINUTE, TIMEOUT, Harness


def test_a_deadline_must_come_after_the_job_is_due() -> None:
    with pytest.raises(InvalidInputError, match="deadline"):
        make_job(deadline=START)
    with pytest.raises(InvalidInputError, match="deadline"):
        make_job(run_after=START + timedelta(minutes=5), deadline=START + timedelta(minutes=1))

    job = make_job(run_after=START + timedelta(minutes=5), deadline=START + timedelta(minutes=6))

    assert job.deadline == START + timedelta(minutes=6)


def test_an_expired_job_has_ended_and_only_a_job_past_its_deadline_may_expire() -> None:
    job = make_job(deadline=START + timedelta(seconds=10))

    assert job.can_start(START + timedelta(seconds=9))
    assert not job.can_start(START + timedelta(seconds=10))
    with pytest.raises(IllegalTransitionError):
        job.expire(START + timedelta(seconds=9))
    job.expire(START + timedelta(seconds=10))

    assert job.status is JobStatus.EXPIRED
    assert JobStatus.EXPIRED in TERMINAL_STATUSES
    assert job.finished_at == START + timedelta(seconds=10)
    assert job.attempts == 0


def test_a_message_carries_its_jobs_deadline() -> None:
    job = make_job(deadline=START + timedelta(seconds=10))

    assert decode(encode(JobMessage.of(job)).body).deadline == job.deadline


async def test_a_delivery_past_its_deadline_expires_the_job_without_asking_the_limits() -> None:
    h = Harness()
    holder = h.add(payload={"message": "a-1"})
    await h.run(holder, limits=ACCOUNT_LOCK, handler=None)  # ran: the lock is free again
    job = h.add(payload={"message": "a-1"}, deadline=START + timedelta(seconds=5))
    h.clock.advance(timedelta(seconds=5))

    await h.runner.run(
        JobMessage.of(job, limit_keys=("account:a-1",)),
        JobRun(_never_called, TIMEOUT, ACCOUNT_LOCK),
    )

    stored = h.store.jobs[job.id]
    assert stored.status is JobStatus.EXPIRED
    assert stored.attempts == 0
    assert h.publisher.published == []  # not deferred, not sent round
    assert h.counters.admitted == 1  # the holder's alone


async def test_a_job_deferred_by_its_rate_limit_expires_when_it_comes_back_too_late() -> None:
    h = Harness()
    await h.run(h.add(), limits=ONE_PER_MINUTE)  # takes the one token of the minute
    job = h.add(deadline=START + timedelta(seconds=30))
    await h.runner.run(JobMessage.of(job), JobRun(_never_called, TIMEOUT, ONE_PER_MINUTE))
    [deferred] = h.publisher.published
    assert h.store.jobs[job.id].status is JobStatus.PENDING
    h.clock.advance(timedelta(seconds=60))  # the token is free, but the deadline passed

    await h.runner.run(decode(deferred.body), JobRun(_never_called, TIMEOUT, ONE_PER_MINUTE))

    stored = h.store.jobs[job.id]
    assert stored.status is JobStatus.EXPIRED
    assert stored.started_at is None
    assert len(h.publisher.published) == 1


async def test_a_message_that_does_not_say_the_deadline_expires_the_job_at_its_claim() -> None:
    h = Harness()
    job = h.add(deadline=START + timedelta(seconds=5))
    h.clock.advance(timedelta(seconds=6))
    older = JobMessage(job.id, job.type, job.queue, job.tenant_id, "m1")  # no deadline label

    await h.runner.run(older, JobRun(_never_called, TIMEOUT, JobLimits()))

    assert h.store.jobs[job.id].status is JobStatus.EXPIRED
    assert h.publisher.published == []  # acknowledged: the job has ended


async def test_a_job_started_before_its_deadline_finishes_after_it() -> None:
    h = Harness()
    job = h.add(deadline=START + timedelta(seconds=5))

    async def slow(payload: object, ctx: object) -> dict[str, str]:
        h.clock.advance(timedelta(seconds=10))
        return {"done": "yes"}

    stored = await h.run(job, handler=slow)

    assert stored.status is JobStatus.SUCCEEDED


async def _never_called(payload: object, ctx: object) -> None:
    raise AssertionError("an expired job's handler ran")
