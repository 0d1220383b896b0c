"""The bodies of a bulk cancel (``POST /jobs/bulk/cancel``, ``POST /admin/jobs/bulk/cancel``)."""

from typing import Literal

from pydantic import AwareDatetime, BaseModel, Field

from jobrail.http.schemas import RequestModel
from jobrail.jobs.cancel import CancelJobsCommand, CancelledJobs
from jobrail.jobs.domain import JobStatus
from jobrail.kernel.ids import TenantId

Cancellable = Literal["pending", "retrying", "blocked", "running"]


class CancelJobsIn(RequestModel):
    type: str | None = Field(None, min_length=1, max_length=128, description="Its job type.")
    status: list[Cancellable] | None = Field(
        None, min_length=1, max_length=4, description="Its statuses (default: all four)."
    )
    entity_id: str | None = Field(
        None, min_length=1, max_length=255, description="The entity it was enqueued for."
    )
    created_before: AwareDatetime | None = Field(
        None, strict=False, description="Made before this time (with its UTC offset)."
    )

    def command(self, tenant_id: TenantId | None) -> CancelJobsCommand:
        statuses = {"statuses": frozenset(map(JobStatus, self.status))} if self.status else {}
        return CancelJobsCommand(
            tenant_id=tenant_id,
            type=self.type,
            entity_id=self.entity_id,
            created_before=self.created_before,
            **statuses,
        )


class AdminCancelJobsIn(CancelJobsIn):
    tenant: str | None = Field(
        None, min_length=1, max_length=128, description="Only this tenant's jobs (default: all)."
    )


class CancelledJobsOut(BaseModel):
    cancelled: int = Field(description="Jobs that had not started, now cancelled.")
    stopping: int = Field(description="Running jobs asked to stop (within about a second).")
    more: bool = Field(description="The filter still takes jobs: call again for the rest.")

    @classmethod
    def of(cls, done: CancelledJobs) -> "CancelledJobsOut":
        return cls(cancelled=done.cancelled, stopping=done.stopping, more=done.more)
