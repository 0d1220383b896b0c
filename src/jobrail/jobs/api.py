import uuid

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter

from jobrail.http.auth import CurrentTenant
from jobrail.http.errors import ERROR_RESPONSES, JsonErrorsRoute
from jobrail.http.rate_limits import RateLimitRead
from jobrail.jobs.cancel import CancelJob, CancelJobCommand
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.jobs.listing import ListJobs
from jobrail.jobs.schemas import JobFilterQuery, JobList, JobOut, jobs_page
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId


class JobsRoute(JsonErrorsRoute, DishkaRoute):
    """Answers its errors as JSON itself: a host app may include this router (with
    ``setup_dishka`` and jobrail's container) without jobrail's error handlers."""


router = APIRouter(prefix="/jobs", tags=["jobs"], route_class=JobsRoute, responses=ERROR_RESPONSES)


@router.get("/{job_id}", summary="A job and its status", dependencies=[RateLimitRead])
async def get_job(
    job_id: uuid.UUID,
    tenant: CurrentTenant,
    get: FromDishka[GetJob],
    flows: FromDishka[FlowService],
) -> JobOut:
    job = await get(GetJobQuery(tenant_id=tenant, job_id=JobId(job_id)))
    view = None
    if job.flow is not None:  # a member or callback of a batch or chain shows it
        try:
            view = await flows.get(tenant, job.flow.flow_id)
        except NotFoundError:
            view = None  # the flow's row is gone (retention): the job still shows
    return JobOut.of(job, view)


@router.get("", summary="Jobs, newest first", dependencies=[RateLimitRead])
async def list_jobs(
    tenant: CurrentTenant, list_jobs: FromDishka[ListJobs], query: JobFilterQuery
) -> JobList:
    return await jobs_page(list_jobs, tenant, query)


@router.post(
    "/{job_id}/cancel",
    summary="Cancel a job",
    description=CancelJob.__doc__,
    # The read budget: a cancel enqueues nothing, and an operator cancelling a backlog
    # must not run out of the tenant's enqueue budget (30 a minute) doing it.
    dependencies=[RateLimitRead],
)
async def cancel_job(
    job_id: uuid.UUID, tenant: CurrentTenant, cancel: FromDishka[CancelJob]
) -> JobOut:
    return JobOut.of(await cancel(CancelJobCommand(tenant_id=tenant, job_id=JobId(job_id))))
