from dataclasses import dataclass

from jobrail.jobs.domain import Job
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.messaging.envelope import job_envelope


@dataclass(frozen=True, slots=True)
class RedriveJobCommand:
    tenant_id: TenantId | None
    """None: an operator acting for every tenant."""
    job_id: JobId


class RedriveJob:
    """Run a failed job again: back to pending with its attempts reset, published again.

    Only failed jobs can be redriven.
    """

    def __init__(self, uow: JobsUnitOfWork, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    async def __call__(self, cmd: RedriveJobCommand) -> Job:
        async with self._uow:
            job = await self._uow.jobs.get(cmd.job_id, cmd.tenant_id, for_update=True)
            if job is None:
                raise NotFoundError(f"job {cmd.job_id} not found")
            job.redrive(self._clock.now())
            await self._uow.jobs.save(job)
            await self._uow.outbox.add(
                job_envelope(
                    job_id=job.id,
                    job_type=job.type,
                    queue=job.queue,
                    tenant_id=job.tenant_id,
                    trace_context=job.trace_context,
                )
            )
            await self._uow.commit()
        return job
