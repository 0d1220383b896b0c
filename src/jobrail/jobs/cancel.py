"""Cancelling jobs: one (`CancelJob`), or every job a filter takes (`CancelJobs`).
A running job is stopped by its worker (``jobrail.worker.cancel_watch``)."""

from dataclasses import dataclass
from datetime import datetime

from jobrail.jobs.domain import IDLE_STATUSES, Job, JobStatus
from jobrail.jobs.ports import CancelFilter, JobsUnitOfWork
from jobrail.jobs.workflows import Workflows, locked_with_flow
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError, NotFoundError
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class CancelJobCommand:
    tenant_id: TenantId | None
    """None: any tenant's job (the CLI)."""
    job_id: JobId


class CancelJob:
    """Cancel a job.

    - pending, retrying or blocked: cancelled at once; its message, when it arrives,
      does nothing. A member of a batch or chain counts as ended (its callbacks and later
      steps follow from that).
    - running: cancel is requested; the worker running it stops its handler within
      about a second (its ``finally`` blocks run), or at its next checkpoint.
    - finished: a conflict.
    """

    def __init__(self, uow: JobsUnitOfWork, clock: Clock, workflows: Workflows) -> None:
        self._uow = uow
        self._clock = clock
        self._workflows = workflows

    async def __call__(self, cmd: CancelJobCommand) -> Job:
        async with self._uow:
            job, flow = await locked_with_flow(self._uow, cmd.job_id, cmd.tenant_id)
            if job is None:
                raise NotFoundError(f"job {cmd.job_id} not found")
            job.cancel(self._clock.now())
            await self._uow.jobs.save(job)
            if flow is not None and job.status is JobStatus.CANCELLED:
                await self._workflows.job_ended(self._uow, flow, job)
                await self._uow.flows.save(flow)
            await self._uow.commit()
        return job


CANCELLABLE = frozenset(IDLE_STATUSES | {JobStatus.RUNNING})
BATCH = 500
"""Jobs cancelled per transaction."""
MAX_BATCHES = 10
"""Transactions per call: a call cancels at most BATCH * MAX_BATCHES jobs."""


@dataclass(frozen=True, slots=True)
class CancelJobsCommand:
    tenant_id: TenantId | None
    """None: every tenant's jobs (the admin API and the CLI only)."""
    statuses: frozenset[JobStatus] = CANCELLABLE
    type: str | None = None
    entity_id: str | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class CancelledJobs:
    cancelled: int
    """Jobs that had not started, now cancelled."""
    stopping: int
    """Running jobs asked to stop: their workers stop them within about a second."""
    more: bool
    """Jobs the filter takes are left: call again to cancel them."""


class CancelJobs:
    """Cancel every job a filter takes, as `CancelJob` cancels one.

    - The filter: job type, statuses (pending, retrying, blocked, running; all four
      when none is given), entity, created before a time; at least one of them, and a
      tenant's own jobs only unless called for every tenant (the admin API, the CLI).
    - 500 jobs per transaction, at most 5,000 per call: `more` says whether the filter
      still takes jobs (call again).
    - A running job is asked to stop (see ``jobrail.worker.cancel_watch``); one asked
      already is not counted again.
    """

    def __init__(self, uow: JobsUnitOfWork, clock: Clock, workflows: Workflows) -> None:
        self._uow = uow
        self._clock = clock
        self._workflows = workflows

    async def __call__(self, cmd: CancelJobsCommand) -> CancelledJobs:
        where = cancel_filter(cmd)
        cancelled = stopping = 0
        for _ in range(MAX_BATCHES):
            async with self._uow as uow:
                ids = await uow.jobs.to_cancel(where, BATCH)
                for job_id in ids:
                    ended = await self._cancel(uow, job_id, where)
                    cancelled += ended is True
                    stopping += ended is False
                await uow.commit()
            if len(ids) < BATCH:
                return CancelledJobs(cancelled, stopping, more=False)
        async with self._uow as uow:
            more = bool(await uow.jobs.to_cancel(where, 1))
        return CancelledJobs(cancelled, stopping, more)

    async def _cancel(self, uow: JobsUnitOfWork, job_id: JobId, where: CancelFilter) -> bool | None:
        """True: cancelled; False: asked to stop; None: it changed since it was found."""
        job, flow = await locked_with_flow(uow, job_id, where.tenant_id)
        if job is None or job.status not in where.statuses or job.cancel_requested:
            return None
        job.cancel(self._clock.now())
        await uow.jobs.save(job)
        if job.status is not JobStatus.CANCELLED:
            return False
        if flow is not None:
            await self._workflows.job_ended(uow, flow, job)
            await uow.flows.save(flow)
        return True


def cancel_filter(cmd: CancelJobsCommand) -> CancelFilter:
    """The jobs `cmd` takes; an `InvalidInputError` for a filter `CancelJobs` refuses."""
    if not cmd.statuses or not cmd.statuses <= CANCELLABLE:
        raise InvalidInputError(
            "statuses: only pending, retrying, blocked and running jobs can be cancelled"
        )
    narrowed = cmd.statuses != CANCELLABLE
    if not (narrowed or cmd.type or cmd.entity_id or cmd.created_before):
        raise InvalidInputError(
            "give at least one of type, status, entity_id or created_before "
            "(to cancel every active job, list the four statuses)"
        )
    return CancelFilter(
        statuses=cmd.statuses,
        tenant_id=cmd.tenant_id,
        type=cmd.type,
        entity_id=cmd.entity_id,
        created_before=cmd.created_before,
    )
