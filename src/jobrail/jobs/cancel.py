from dataclasses import dataclass

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.jobs.workflows import Workflows, locked_with_flow
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class CancelJobCommand:
    tenant_id: TenantId
    job_id: JobId


class CancelJob:
    """Cancel a job.

    - pending, retrying or blocked: cancelled at once; its message, when it arrives,
      does nothing. A member of a batch or chain counts as ended (its callbacks and later
      steps follow from that).
    - running: cancel is requested and honoured at the job's next checkpoint.
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
