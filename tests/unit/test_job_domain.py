from datetime import timedelta

import pytest

from jobrail.jobs.domain import IllegalTransitionError, JobStatus, RetriesExhaustedError
from tests.fakes import START, make_job

LEASE = timedelta(seconds=30)
LATER = START + timedelta(seconds=5)


def test_a_new_job_is_pending_with_no_attempts() -> None:
    job = make_job()

    assert job.status is JobStatus.PENDING
    assert job.attempts == 0
    assert job.created_at == job.updated_at == START


def test_max_attempts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        make_job(max_attempts=0)


def test_start_claims_an_attempt_with_a_lease() -> None:
    job = make_job()

    job.start(LATER, LEASE)

    assert job.status is JobStatus.RUNNING
    assert job.attempts == 1
    assert job.started_at == LATER
    assert job.lease_until == LATER + LEASE


def test_success_stores_the_result_and_finishes() -> None:
    job = make_job()
    job.start(START, LEASE)

    job.succeed({"echo": "hi"}, LATER)

    assert job.status is JobStatus.SUCCEEDED
    assert job.result == {"echo": "hi"}
    assert job.finished_at == LATER
    assert job.lease_until is None


def test_retry_later_keeps_the_error_and_the_due_time() -> None:
    job = make_job()
    job.start(START, LEASE)

    job.retry_later("boom", LATER, START)

    assert job.status is JobStatus.RETRYING
    assert job.last_error == "boom"
    assert job.run_after == LATER


def test_a_retrying_job_cannot_start_before_it_is_due() -> None:
    job = make_job()
    job.start(START, LEASE)
    job.retry_later("boom", LATER, START)

    assert not job.can_start(START + timedelta(seconds=1))
    with pytest.raises(IllegalTransitionError):
        job.start(START + timedelta(seconds=1), LEASE)

    job.start(LATER, LEASE)
    assert job.attempts == 2


def test_retry_is_refused_once_attempts_are_used_up() -> None:
    job = make_job(max_attempts=1)
    job.start(START, LEASE)

    with pytest.raises(RetriesExhaustedError):
        job.retry_later("boom", LATER, START)


def test_a_failed_job_keeps_its_error_and_is_terminal() -> None:
    job = make_job()
    job.start(START, LEASE)

    job.fail("bad input", LATER)

    assert job.status is JobStatus.FAILED
    assert job.status.is_terminal
    assert job.last_error == "bad input"


def test_errors_are_clipped_to_a_bounded_length() -> None:
    job = make_job()
    job.start(START, LEASE)

    job.fail("x" * 10_000, LATER)

    assert job.last_error is not None
    assert len(job.last_error) == 2000


@pytest.mark.parametrize("status_setup", ["succeeded", "failed", "cancelled"])
def test_a_finished_job_cannot_start_again(status_setup: str) -> None:
    job = make_job()
    if status_setup == "cancelled":
        job.cancel(START)
    else:
        job.start(START, LEASE)
        job.succeed(None, START) if status_setup == "succeeded" else job.fail("x", START)

    assert not job.can_start(LATER + LEASE * 10)
    with pytest.raises(IllegalTransitionError, match=f"it is {status_setup}"):
        job.start(LATER, LEASE)


def test_a_running_job_whose_lease_ended_can_be_taken_over() -> None:
    job = make_job()
    job.start(START, LEASE)

    assert not job.can_start(START + LEASE - timedelta(seconds=1))
    job.start(START + LEASE, LEASE)

    assert job.attempts == 2
    assert job.lease_until == START + 2 * LEASE


def test_cancel_of_a_pending_job_is_immediate() -> None:
    job = make_job()

    job.cancel(LATER)

    assert job.status is JobStatus.CANCELLED
    assert job.finished_at == LATER


def test_cancel_of_a_running_job_is_a_request_honoured_at_a_checkpoint() -> None:
    job = make_job()
    job.start(START, LEASE)

    job.cancel(LATER)
    assert job.status is JobStatus.RUNNING
    assert job.cancel_requested

    job.stop_cancelled(LATER)
    assert job.status is JobStatus.CANCELLED


def test_cancel_of_a_finished_job_is_refused() -> None:
    job = make_job()
    job.start(START, LEASE)
    job.succeed(None, LATER)

    with pytest.raises(IllegalTransitionError, match="cannot cancel"):
        job.cancel(LATER)


def test_redrive_gives_a_failed_job_fresh_attempts() -> None:
    job = make_job()
    job.start(START, LEASE)
    job.fail("boom", START)

    job.redrive(LATER)

    assert job.status is JobStatus.PENDING
    assert job.attempts == 0
    assert job.finished_at is None
    assert job.can_start(LATER)


@pytest.mark.parametrize("action", ["pending", "running", "succeeded"])
def test_only_failed_jobs_can_be_redriven(action: str) -> None:
    job = make_job()
    if action != "pending":
        job.start(START, LEASE)
    if action == "succeeded":
        job.succeed(None, START)

    with pytest.raises(IllegalTransitionError, match="cannot redrive"):
        job.redrive(LATER)


def test_succeed_requires_a_running_job() -> None:
    with pytest.raises(IllegalTransitionError):
        make_job().succeed(None, START)


def test_jobs_compare_by_identity() -> None:
    job = make_job()
    twin = make_job(id=job.id, payload={"other": True})

    assert job == twin
    assert job != make_job()
