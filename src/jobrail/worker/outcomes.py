"""What a delivery and its attempt come to: the decisions of the runner, without I/O
but for the wait on another attempt's lease.

**An attempt's end.** `classify` turns what a handler raised into a `Verdict`,
`retry_limit` says how many attempts that kind of failure may use, and `conclude`
applies the verdict to the job and says which message goes next (its next attempt's,
or its dead letter): the runner records the job and sends the message. Between
attempts a job waits its type's retry policy (``jobrail.jobs.retry``: exponential
backoff with full jitter).

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

**Messages that cannot run now.** A delivery's job may not be startable when the
message arrives: the message came back early from a delay tier (tiers are coarse),
names a job that does not exist or that is another tenant's or type's, names a
finished job (a duplicate), or the job is not due yet or still leased by a live
attempt. `when_due`, `unclaimed` and `sent_on` decide, from the message and the job as
read; the runner sends the message on.

**Taking over a dead worker's job.** When a worker dies, RabbitMQ hands its
unacknowledged messages to the other consumers at once, at the head of the queue. The
job row is still claimed by the dead attempt, so the claim fails (`leased_elsewhere`);
the worker then *holds* the delivery (`wait_out_lease`), looking at the row about once
a second, and claims the job as soon as that lease has ended: a dead worker's job
starts again about one lease after its death, whatever the backlog behind it.
(Re-publishing the message to come back at the lease end, as the runner once did, put
it at the back of the queue: with a backlog, the job waited for all of it.) A delivery
whose job stays leased for `HOLD_LEASES` leases belongs to a live attempt (a duplicate
message, or one RabbitMQ redelivered after a channel closed under a working worker):
the runner re-publishes it to come back when that lease ends, so that it does not hold
a worker slot for a long job's whole run.

A job with a lock or concurrency slots: the dead attempt's lock (its TTL often far
longer than the lease) would turn the delivery away. The holder tokens of a job's
admissions name the job (``jobs.gating.job_owner``), so the admission says when only
the job's own earlier admissions hold what it needs (``Deferred.own``). The limits
middleware then lets the job be claimed first (holding the delivery while the old
lease lasts, as above) and, claimed, takes the lock and slots over: a claim means no
other attempt of the job is alive (the dead one stopped itself before its lease ended;
a duplicate delivery's admission will fail its claim). The lock's fence grows, so the
dead attempt's fenced writes are refused. Turned away at that point (a rate limit), the
job gives its claim and attempt back and is deferred (``GiveBack``).

Worker heartbeats would detect a death about as fast, but need a table, a writer per
process and a second liveness rule beside the lease; the short lease is the one rule,
and only jobs longer than a third of it write anything more.
"""

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from jobrail.jobs.domain import DUE_TOLERANCE, Job, JobStatus
from jobrail.jobs.messages import DeadLetterMessage, JobMessage, Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.clock import Clock
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

# One encoder for every result: ``json.dumps`` with options makes a new one each time.
_RESULT_JSON = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
# Infrastructure the handler needed being away counts as transient.
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
    if isinstance(exc, _TRANSIENT):
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


# A message this close to its time waits in the worker instead of in a delay tier.
SHORT_WAIT = timedelta(milliseconds=30)
# A job that is not claimable, with no time of its own to come back at, is looked at
# again this much later.
LOOK_AGAIN = timedelta(seconds=1)


def when_due(message: JobMessage, now: datetime) -> tuple[bool, float]:
    """Whether the message goes round again (it is early by more than SHORT_WAIT), and
    otherwise how many seconds to wait here first (0 when it is due)."""
    if message.not_before is None:
        return False, 0.0
    early = (message.not_before - now).total_seconds()
    if early > SHORT_WAIT.total_seconds():
        return True, 0.0
    return False, max(early, 0.0)


@dataclass(frozen=True, slots=True)
class Refuse:
    """Dead-letter the message with `reason`; the job row is left alone."""

    reason: str


@dataclass(frozen=True, slots=True)
class Done:
    """Nothing to run (the job is finished, or another message will start it): acknowledge
    the message, run nothing."""


@dataclass(frozen=True, slots=True)
class ComeBack:
    """Send the message round again, to arrive at `at`."""

    at: datetime


def unclaimed(message: JobMessage, current: Job | None, now: datetime) -> Refuse | Done | ComeBack:
    """Where a message goes whose claim failed (`current`: the job as it is, if any)."""
    if current is None:
        return Refuse(f"job {message.job_id} does not exist")
    if not message.names(current):
        # Someone published a message naming a job of another tenant or type: it is
        # never run on the message's word.
        return Refuse(f"the message's tenant or type does not match job {message.job_id}")
    if current.status.is_terminal:
        return Done()
    if current.status is JobStatus.BLOCKED:
        # Waiting for the rest of its batch or chain: the release sends its own message.
        return Done()
    if current.is_held:  # the dispatcher sends its own message when it releases the job
        return Done()
    # Not due yet, or still leased by a live attempt: come back when that ends.
    at = (
        current.lease_until
        if current.lease_until and current.lease_until > now
        else current.run_after
    )
    if at is None or at <= now + DUE_TOLERANCE:
        at = now + LOOK_AGAIN
    return ComeBack(at)


def leased_elsewhere(message: JobMessage, current: Job | None, now: datetime) -> bool:
    """Whether the job the message names is running under a lease that has not ended."""
    return (
        current is not None
        and message.names(current)
        and current.status is JobStatus.RUNNING
        and current.lease_until is not None
        and current.lease_until > now
    )


def sent_on(
    message: JobMessage, current: Job | None, now: datetime, dead_letter_queue: str
) -> Outgoing | None:
    """What to publish for a delivery whose claim failed (`current`: the job as it is, if
    any): its dead letter, itself again later, or nothing (acknowledge it as it is)."""
    route = unclaimed(message, current, now)
    if isinstance(route, Refuse):
        log.warning("message %s dead-lettered: %s", message.message_id, route.reason)
        return refused(message, route.reason, dead_letter_queue, now)
    if isinstance(route, Done):
        assert current is not None
        log.info(
            "job %s %s; message %s acknowledged without running",
            current.id,
            "waits for the dispatcher" if current.is_held else f"is already {current.status.value}",
            message.message_id,
        )
        return None
    log.debug("job %s not claimable now; deferred to %s", message.job_id, route.at)
    return message.again(not_before=route.at)


def refused(
    message: JobMessage, reason: str, dead_letter_queue: str, now: datetime
) -> DeadLetterMessage:
    """The dead letter of a message the runner will not run, with the reason."""
    return DeadLetterMessage(
        message=replace(message.again(), message_id=message.message_id),
        reason=reason,
        source_queue=message.queue,
        dead_letter_queue=dead_letter_queue,
        at=now,
    )


# A delivery whose job another attempt holds looks at the job this often while it waits
# for that lease to end (so that it lets go soon after that attempt finishes)...
TAKEOVER_POLL = timedelta(seconds=1)
# ...for at most this many of the job's leases: longer, and the holder is alive.
HOLD_LEASES = 2


async def wait_out_lease(
    leased: Job,
    until: datetime,
    read: Callable[[], Awaitable[Job | None]],
    clock: Clock,
    sleep: Callable[[float], Awaitable[None]],
) -> Job | None:
    """Hold the delivery while the attempt that holds `leased` keeps its lease, reading
    the job (`read`) every TAKEOVER_POLL. None once that lease has ended or the attempt
    has ended (claim again, or find the job finished); the job as last read if it is
    still leased at `until` (its attempt is alive and renewing)."""
    token = ClaimToken.of(leased)
    job = leased
    while True:
        now = clock.now()
        assert job.lease_until is not None
        if job.lease_until <= now:
            log.info(
                "job %s: the lease of attempt %d ended (its worker stopped renewing it); "
                "taking the job over",
                job.id,
                token.attempt,
            )
            return None
        if now >= until:
            return job
        wake_at = min(job.lease_until, until, now + TAKEOVER_POLL)
        await sleep((wake_at - now).total_seconds())
        current = await read()
        if (
            current is None
            or current.status is not JobStatus.RUNNING
            or current.lease_until is None
            or ClaimToken.of(current) != token
        ):
            return None
        job = current
