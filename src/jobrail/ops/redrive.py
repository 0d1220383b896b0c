"""Running a failed job again, and taking its dead letter out of the DLQ.

A failed job has one dead letter: the message that ran its last attempt, naming the
failure (the job's ``finished_at``, see jobrail.transport.codec). Redriving the job
makes every letter of that failure and of earlier ones stale, so `RedriveJob` removes
them from the DLQ after the commit; a job that fails again afterwards then has exactly
one letter, its new one. A letter made after the redrive names a later failure and is
never taken for a stale one.

That clean-up takes each letter it looks at and gives back the ones it keeps, and a
quorum DLQ counts every return as a delivery. A DLQ kept from an older jobrail without
its explicit delivery limit (``DeadLetterQueue.safe_to_scan``) would on RabbitMQ 4 drop
every letter after 20 such looks, that is after 20 redrives: the clean-up is skipped
there, and the answer says so.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.enqueue import message_for
from jobrail.jobs.intake import JobCatalog
from jobrail.jobs.messages import DeadLetter
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.jobs.workflows import locked_with_flow
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError, ConflictError, NotFoundError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.ops.ports import DeadLetterQueue

log = logging.getLogger("jobrail.jobs")

# How many dead letters a redrive looks through for the job's old ones, oldest first:
# each look is one round trip to RabbitMQ, inside the operator's request. A stale letter
# further back is removed by the next `{"all": true}` redrive instead.
CLEAN_UP_LIMIT = 1000
# How many a filtered purge looks through (each is held in memory meanwhile).
SCAN_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class RedriveJobCommand:
    tenant_id: TenantId | None
    """None: an operator acting for every tenant."""
    job_id: JobId
    failed_at: datetime | None = None
    """Redrive only the failure that ended then (a dead letter names it): if the job has
    been redriven or has failed again since, raise `SupersededFailureError`."""
    clear_dead_letters: bool = True
    """Remove the job's stale dead letters from the DLQ after the commit."""


class SupersededFailureError(ConflictError):
    """The failure a dead letter records is not the job's current state any more."""


@dataclass(frozen=True, slots=True)
class Redriven:
    job: Job
    failed_at: datetime
    """When the failure that was redriven ended (the job's finished_at before)."""


@dataclass(frozen=True, slots=True)
class CleanUp:
    """What became of the redriven jobs' stale dead letters."""

    removed: int
    """How many left the DLQ."""
    note: str
    """The same for an operator, with why none were looked for if so."""


@dataclass(frozen=True, slots=True)
class RedrivenJob:
    job: Job
    dead_letters: CleanUp


NOT_SCANNED = (
    "its dead letters stay in the DLQ: the DLQ was declared by an older jobrail without "
    "an explicit delivery limit, and every look at it counts as a delivery (on RabbitMQ 4 "
    "a letter is dropped after 20), so a redrive does not go through it (see the broker's "
    "start-up warning)"
)


def is_stale_letter_of(letter: DeadLetter, job_id: JobId, failed_at: datetime) -> bool:
    """Whether `letter` records a failure of the job that ended at or before `failed_at`
    (a redrive of that failure supersedes it)."""
    return (
        letter.job_id == job_id
        and letter.job_failed_at is not None
        and letter.job_failed_at <= failed_at
    )


class RedriveJob:
    """Run a failed job again: back to pending with its attempts reset, published again.

    Only failed jobs can be redriven. Its dead letters leave the DLQ.
    """

    def __init__(
        self, uow: JobsUnitOfWork, clock: Clock, dlq: DeadLetterQueue, catalog: JobCatalog
    ) -> None:
        self._uow = uow
        self._catalog = catalog
        self._clock = clock
        self._dlq = dlq

    async def __call__(self, cmd: RedriveJobCommand) -> RedrivenJob:
        redriven = await self.redrive(cmd)
        if not cmd.clear_dead_letters:
            return RedrivenJob(redriven.job, CleanUp(0, "its dead letters were not looked for"))
        cleaned = await self.clear_dead_letters({redriven.job.id: redriven.failed_at})
        return RedrivenJob(redriven.job, cleaned)

    async def redrive(self, cmd: RedriveJobCommand) -> Redriven:
        """The redrive itself, in one transaction (no DLQ clean-up)."""
        async with self._uow:
            job, flow = await locked_with_flow(self._uow, cmd.job_id, cmd.tenant_id)
            if job is None:
                raise NotFoundError(f"job {cmd.job_id} not found")
            if cmd.failed_at is not None and not _is_current_failure(job, cmd.failed_at):
                raise SupersededFailureError(
                    f"job {job.id} has been redriven or has failed again since this dead "
                    f"letter (it is {job.status.value})"
                )
            failed_at = job.finished_at or self._clock.now()
            job.redrive(self._clock.now())
            await self._uow.jobs.save(job)
            if flow is not None:
                # Its batch or chain counts it as running again (jobrail.jobs.flow).
                flow.member_reopened(JobStatus.FAILED, self._clock.now())
                await self._uow.flows.save(flow)
            await self._uow.outbox.add(message_for(job, self._catalog.get(job.type)))
            await self._uow.commit()
        return Redriven(job, failed_at)

    async def clear_dead_letters(self, failures: dict[JobId, datetime]) -> CleanUp:
        """Remove the dead letters of the redriven failures (job id: when it ended) and of
        their earlier failures, among the first CLEAN_UP_LIMIT; say how many went. The
        redrives are committed, so a broker that cannot be reached only leaves stale
        letters behind: logged, not raised (`{"all": true}` removes them later). Skipped
        when the DLQ is not `safe_to_scan`."""
        if not self._dlq.safe_to_scan:
            log.info(
                "not removing the dead letters of %d redriven jobs: %s", len(failures), NOT_SCANNED
            )
            return CleanUp(0, NOT_SCANNED)
        removed = 0

        async def stale(letter: DeadLetter) -> bool:
            nonlocal removed
            failed_at = failures.get(letter.job_id) if letter.job_id else None
            if failed_at is None or letter.job_id is None:
                return False
            if is_stale_letter_of(letter, letter.job_id, failed_at):
                removed += 1
                return True
            return False

        try:
            await self._dlq.settle_dead_letters(stale, CLEAN_UP_LIMIT)
        except BrokerUnavailableError as exc:
            log.warning(
                "could not remove the dead letters of %d redriven jobs (%s); a redrive of "
                "the whole DLQ removes them later",
                len(failures),
                exc,
            )
            return CleanUp(removed, f"its dead letters stay in the DLQ: {exc}")
        return CleanUp(
            removed,
            f"{removed} stale dead letters removed (of the first {CLEAN_UP_LIMIT} in the DLQ)",
        )


def _is_current_failure(job: Job, failed_at: datetime) -> bool:
    # A later failure has a later finished_at; any other status means a redrive since.
    return (
        job.status is JobStatus.FAILED
        and job.finished_at is not None
        and job.finished_at <= failed_at
    )
