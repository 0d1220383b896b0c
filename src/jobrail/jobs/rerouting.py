"""Messages that cannot run now, and where they go.

A delivery's job may not be startable when the message arrives: the message came back
early from a delay tier (tiers are coarse), names a job that does not exist or that is
another tenant's or type's, names a finished job (a duplicate), or the job is not due
yet or still leased by a live attempt. `when_due` and `unclaimed` decide, from the
message and the job as read, without I/O; the runner sends the message on.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.jobs.domain import DUE_TOLERANCE, Job, JobStatus
from jobrail.jobs.messages import JobMessage

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
    if (current.tenant_id, current.type) != (message.tenant_id, message.job_type):
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
        and (current.tenant_id, current.type) == (message.tenant_id, message.job_type)
        and current.status is JobStatus.RUNNING
        and current.lease_until is not None
        and current.lease_until > now
    )
