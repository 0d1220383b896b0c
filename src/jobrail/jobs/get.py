from dataclasses import dataclass

from jobrail.jobs.domain import Job
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class GetJobQuery:
    tenant_id: TenantId
    job_id: JobId


class GetJob:
    """A job of the asking tenant. Another tenant's job is reported as not found."""

    def __init__(self, uow: JobsUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, query: GetJobQuery) -> Job:
        async with self._uow:
            job = await self._uow.jobs.get(query.job_id, query.tenant_id)
        if job is None:
            raise NotFoundError(f"job {query.job_id} not found")
        return job
