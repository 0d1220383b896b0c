from dataclasses import dataclass

from jobrail.jobs.domain import Job
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class CancelJobCommand:
    tenant_id: TenantId
    job_id: JobId


class CancelJob:
    """Cancel a job.

    - pending or retrying: cancelled at once; its message, when it arrives, does nothing.
    - running: cancel is requested and honoured at the job's next checkpoint.
    - finished: a conflict.
    """

    def __init__(self, uow: JobsUnitOfWork, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    async def __call__(self, cmd: CancelJobCommand) -> Job:
        async with self._uow:
            job = await self._uow.jobs.get(cmd.job_id, cmd.tenant_id, for_update=True)
            if job is None:
                raise NotFoundError(f"job {cmd.job_id} not found")
            job.cancel(self._clock.now())
            await self._uow.jobs.save(job)
            await self._uow.commit()
        return job
