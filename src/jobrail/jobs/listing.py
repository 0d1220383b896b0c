from dataclasses import dataclass

from jobrail.jobs.domain import JobStatus
from jobrail.jobs.ports import Cursor, JobFilter, JobPage, JobsUnitOfWork
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId

MAX_PAGE_SIZE = 200


@dataclass(frozen=True, slots=True)
class ListJobsQuery:
    tenant_id: TenantId
    status: JobStatus | None = None
    type: str | None = None
    entity_id: str | None = None
    limit: int = 50
    after: Cursor | None = None


class ListJobs:
    """The asking tenant's jobs, newest first, filtered by status, type and entity.

    Pages hold at most 200 jobs; `next_cursor` continues where a page ended.
    """

    def __init__(self, uow: JobsUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, query: ListJobsQuery) -> JobPage:
        if not 1 <= query.limit <= MAX_PAGE_SIZE:
            raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
        where = JobFilter(
            tenant_id=query.tenant_id,
            status=query.status,
            type=query.type,
            entity_id=query.entity_id,
        )
        async with self._uow:
            return await self._uow.jobs.list(where, query.limit, query.after)
