"""What a job handler sees of the job it runs."""

from dataclasses import dataclass

from jobrail.jobs.ports import JobStore
from jobrail.kernel.ids import JobId, TenantId


class JobCancelledError(Exception):
    """Raised at a checkpoint when someone asked to cancel the running job."""


@dataclass(slots=True)
class JobContext:
    job_id: JobId
    job_type: str
    tenant_id: TenantId
    attempt: int
    max_attempts: int
    _store: JobStore
    fence: int | None = None
    """The fencing token of the job's lock, if it declares one. Pass it to writes that
    the lock protects, so that a write from a holder that lost the lock is refused."""

    async def checkpoint(self) -> None:
        """Stop here if cancel was requested. Long handlers call this between steps."""
        if await self._store.cancel_requested(self.job_id):
            raise JobCancelledError(f"job {self.job_id} was cancelled")
