"""The admin route that cancels every job a filter takes, of one tenant or of all
(under ``/admin``, admin keys only). As ``jobrail jobs cancel``."""

from dishka.integrations.fastapi import FromDishka

from jobrail.jobs.cancel import CancelJobs
from jobrail.jobs.cancel_schemas import AdminCancelJobsIn, CancelledJobsOut
from jobrail.kernel.ids import TenantId
from jobrail.ops.admin_routes import admin_router

router = admin_router()


@router.post(
    "/jobs/bulk/cancel",
    summary="Cancel every job a filter takes, of any tenant",
    description=f"{CancelJobs.__doc__}\n\nWithout `tenant`, every tenant's jobs.",
)
async def cancel_jobs(body: AdminCancelJobsIn, cancel: FromDishka[CancelJobs]) -> CancelledJobsOut:
    tenant = TenantId(body.tenant) if body.tenant is not None else None
    return CancelledJobsOut.of(await cancel(body.command(tenant)))
