"""What the end of an attempt means: the error classification and the retry decision.

`classify` turns what a handler raised into a `Verdict`, `retry_limit` says how many
attempts that kind of failure may use, and `conclude` applies the verdict to the job and
says which message goes next (its next attempt's, or its dead letter), without I/O: the
runner records the job and sends the message. Between attempts a job waits its type's
retry policy (``jobrail.jobs.retry``: exponential backoff with full jitter).

| raised                                         | verdict                                   |
|------------------------------------------------|-------------------------------------------|
| ``JobCancelledError`` (a cancel checkpoint)    | cancelled                                  |
| ``LeaseLostError``, unconfirmed and on time    | give the attempt back (the database stalled)|
| ``PermanentError`` (and a result too large)    | failed at once, dead-lettered              |
| ``ThrottledError`` (someone else's 429)        | wait its retry-after, no attempt spent     |
| ``TransientError``, a store/broker/limits outage, a timeout | retry, up to max attempts     |
| anything else                                  | retry, up to ``max_attempts_unknown``      |

(``max_attempts_unknown`` unless the job type declares its own ``max_attempts``: that one
then holds for every error that is retried, see `RetryPolicy.attempts_for`.)
"""

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import DeadLetterMessage, JobMessage, Outgoing
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.errors import (
    BrokerUnavailableError,
    PermanentError,
    StoreUnavailableError,
    ThrottledError,
    TransientError,
)
from jobrail.kernel.json_text import has_nul_escape
from jobrail.limits.model import JobLimits, LimitsUnavailableError
from jobrail.worker.context import JobCancelledError
from jobrail.worker.watchdog import LeaseLostError

log = logging.getLogger("jobrail.runner")

# Infrastructure the handler needed being away counts as transient.
# One encoder for every result: ``json.dumps`` with options makes a new one each time.
_RESULT_JSON = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
_TRANSIENT = (TransientError, StoreUnavailableError, BrokerUnavailableError, LimitsUnavailableError)


class Next(Enum):
    CANCEL = "cancel"
    GIVE_BACK = "give back"
    RETRY = "retry"
    FAIL = "fail"
    THROTTLE = "throttle"


@dataclass(frozen=True, slots=True)
class Verdict:
    next: Next
    error: str = ""
    unknown: bool = False
    """An unexpected error (not one the platform or the handler named): fewer retries."""
    retry_after: timedelta | None = None
    """For THROTTLE: how long the throttling party asked to wait."""

    @property
    def runs_again(self) -> bool:
        """Whether the job would run again on its retry policy: a cancel asked for
        meanwhile stops it instead (`conclude`'s `cancel_requested`)."""
        return self.next in (Next.RETRY, Next.GIVE_BACK)


def classify(exc: BaseException, timeout: timedelta) -> Verdict:
    """What `exc`, raised by an attempt that had `timeout`, means for the job."""
    if isinstance(exc, JobCancelledError):
        return Verdict(Next.CANCEL)
    if isinstance(exc, LeaseLostError):
        # Unconfirmed: the database stalled, not the job; a stall of a few seconds must
        # not use up a long job's attempts (nor fail it on its last). Bounded: only an
        # attempt that stopped on time is unconfirmed (see LeaseWatchdog).
        return Verdict(Next.GIVE_BACK if exc.unconfirmed else Next.RETRY, describe(exc))
    if isinstance(exc, PermanentError):
        return Verdict(Next.FAIL, f"permanent error: {describe(exc)}")
    if isinstance(exc, ThrottledError):
        return Verdict(
            Next.THROTTLE, describe(exc), retry_after=timedelta(seconds=exc.retry_after_s)
        )
    if isinstance(
        exc,
        TransientError | StoreUnavailableError | BrokerUnavailableError | LimitsUnavailableError,
    ):
        # Infrastructure the handler needed was away: as transient as it gets.
        return Verdict(Next.RETRY, describe(exc))
    if isinstance(exc, TimeoutError):
        return Verdict(Next.RETRY, f"timed out after {timeout.total_seconds():g}s")
    return Verdict(Next.RETRY, f"unexpected error: {describe(exc)}", unknown=True)


def retry_limit(
    verdict: Verdict, max_attempts: int, policy: RetryPolicy, job_type: str | None = None
) -> int:
    """How many attempts in all a job (of `job_type`; None: a type that declares no
    max_attempts of its own) may make for a failure of this kind."""
    return policy.attempts_for(job_type, max_attempts, unknown=verdict.unknown)


def conclude(
    job: Job,
    verdict: Verdict,
    *,
    now: datetime,
    policy: RetryPolicy,
    cancel_requested: bool,
    limits: JobLimits,
    delivery: JobMessage,
    dead_letter_queue: str,
) -> Sequence[Outgoing]:
    """Apply an attempt's failure to `job` (cancelled, failed, throttled, retrying or
    given back); return the messages to send once it is recorded. `cancel_requested`:
    whether someone asked to cancel the job while it ran (read only when the verdict
    `runs_again`); `policy`: the job type's retry policy."""
    if verdict.next is Next.CANCEL or (verdict.runs_again and cancel_requested):
        job.stop_cancelled(now)
        return ()
    if verdict.next is Next.FAIL:
        log.warning("job %s (%s) failed: %s", job.id, job.type, verdict.error)
        return (failed(job, verdict.error, delivery, dead_letter_queue, now),)
    if verdict.next is Next.THROTTLE:
        assert verdict.retry_after is not None
        run_after = now + verdict.retry_after
        job.throttled(verdict.error, run_after, now)
        return (next_message(job, run_after, limits),)
    run_after = now + policy.delay(job.attempts)
    if verdict.next is Next.GIVE_BACK:
        log.warning(
            "job %s: %s; it will run again, this attempt not counted", job.id, verdict.error
        )
        job.throttled(verdict.error, run_after, now)
    elif job.attempts >= retry_limit(verdict, job.max_attempts, policy, job.type):
        error = f"{verdict.error} (gave up after {job.attempts} attempts)"
        log.warning("job %s (%s) failed: %s", job.id, job.type, error)
        return (failed(job, error, delivery, dead_letter_queue, now),)
    else:
        # A retry is otherwise seen only in the job's row: say it where logs are read.
        log.warning(
            "job %s (%s): attempt %d failed (%s); retrying in %.1fs",
            job.id,
            job.type,
            job.attempts,
            verdict.error,
            (run_after - now).total_seconds(),
        )
        job.retry_later(verdict.error, run_after, now)
    return (next_message(job, run_after, limits),)


def failed(
    job: Job, error: str, delivery: JobMessage, dead_letter_queue: str, now: datetime
) -> DeadLetterMessage:
    """Fail the job; its dead letter is the message that ran it, under its id, and names
    the failure (the job's finished_at) so that a redrive can tell it from the letters
    of earlier failures."""
    job.fail(error, now)
    return DeadLetterMessage(
        message=replace(JobMessage.of(job), message_id=delivery.message_id),
        reason=job.last_error or error,
        source_queue=job.queue,
        dead_letter_queue=dead_letter_queue,
        at=now,
        job_failed_at=job.finished_at,
    )


def next_message(job: Job, run_after: datetime, limits: JobLimits) -> JobMessage:
    """The job's message for its next attempt, due at `run_after`, with its limit keys."""
    keys = limits.keys({**job.payload, "tenant_id": job.tenant_id}) if limits else None
    return JobMessage.of(job, limit_keys=keys, not_before=run_after)


def stored_result(result: Mapping[str, Any] | None, max_bytes: int) -> dict[str, Any] | None:
    """A handler's result as the jobs table stores it: a JSON object of at most
    `max_bytes` (as UTF-8), without NUL; anything else is a PermanentError."""
    if result is None:
        return None
    try:
        text = _RESULT_JSON.encode(dict(result))
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"the job's result is not JSON: {exc}") from exc
    size = len(text.encode())
    if size > max_bytes:
        raise PermanentError(
            f"the job's result is {size} bytes of JSON, more than the {max_bytes} a job "
            "may store (JOBRAIL_JOBS__MAX_RESULT_BYTES): store large output elsewhere "
            "and return a reference"
        )
    if has_nul_escape(text):
        raise PermanentError("the job's result holds a NUL character (U+0000)")
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
