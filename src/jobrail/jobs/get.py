from dataclasses import dataclass

from jobrail.jobs.domain import CLAIMABLE_STATUSES, Job
from jobrail.jobs.ports import JobsUnitOfWork, Pause, PauseReader
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class GetJobQuery:
    tenant_id: TenantId
    job_id: JobId


class GetJob:
    """A job of the asking tenant. Another tenant's job is reported as not found."""

    def __init__(self, uow: JobsUnitOfWork, pauses: PauseReader) -> None:
        self._uow = uow
        self._pauses = pauses

    async def __call__(self, query: GetJobQuery) -> Job:
        async with self._uow:
            job = await self._uow.jobs.get(query.job_id, query.tenant_id)
        if job is None:
            raise NotFoundError(f"job {query.job_id} not found")
        return job

    async def pause_of(self, job: Job) -> Pause | None:
        """What holds `job` back if it waits to start and an operator paused its queue,
        type or tenant: why it waits."""
        if job.status not in CLAIMABLE_STATUSES:
            return None
        return await self._pauses.pause_of(job)
