"""Messages that cannot run now, and where they go.

A delivery's job may not be startable when the message arrives: the message came back
early from a delay tier (tiers are coarse), names a job that does not exist or that is
another tenant's or type's, names a finished job (a duplicate), or the job is not due
yet or still leased by a live attempt. `when_due`, `unclaimed` and `sent_on` decide,
from the message and the job as read, without I/O; the runner sends the message on.
"""

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from jobrail.jobs.domain import DUE_TOLERANCE, Job, JobStatus
from jobrail.jobs.messages import DeadLetterMessage, JobMessage, Outgoing

log = logging.getLogger("jobrail.runner")

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
    """The job is finished already: acknowledge the message, run nothing."""


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
            "job %s is already %s; message %s acknowledged without running",
            current.id,
            current.status.value,
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
