"""The jobs routes (``POST /jobs``, ``GET /jobs/{id}``, ``GET /jobs``,
``POST /jobs/{id}/cancel``, ``POST /jobs/bulk/cancel``), once,
for jobrail's API (``router``) and for a host's ``JobRail.router`` (which builds its own
with ``jobs_router``: its tenant, its use cases from the rail's container, its route
class, and adds a job's events)."""

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any

from dishka import FromComponent
from dishka.integrations.fastapi import DishkaRoute
from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute

from jobrail.http.auth import current_tenant
from jobrail.http.errors import ERROR_RESPONSES, JsonErrorsRoute
from jobrail.http.rate_limits import Group, RateLimitEnqueue, RateLimitRead
from jobrail.http.schemas import IDEMPOTENCY_KEY_OPENAPI, idempotency_key
from jobrail.jobs.cancel import CancelJob, CancelJobCommand, CancelJobs
from jobrail.jobs.cancel_schemas import CancelJobsIn, CancelledJobsOut
from jobrail.jobs.enqueue import EnqueueOpenJob
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.jobs.listing import ListJobs
from jobrail.jobs.schemas import (
    JobAccepted,
    JobFilterQuery,
    JobList,
    JobOut,
    JobRequest,
    accepted,
    jobs_page,
)
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId, TenantId


class JobsRoute(JsonErrorsRoute, DishkaRoute):
    """Answers its errors as JSON itself: a host app may include this router (with
    ``setup_dishka`` and jobrail's container) without jobrail's error handlers."""


def from_dishka(kind: type[Any]) -> Any:
    """A use case from the app's dishka container, as ``FromDishka[kind]`` (the route
    class must be a ``DishkaRoute``)."""
    return FromComponent()


def rate_limited(group: Group) -> Any:
    """The app's API rate limits of `group`: ``RateLimitRead`` or ``RateLimitEnqueue``."""
    return RateLimitRead if group == "read" else RateLimitEnqueue


def jobs_router(
    *,
    tenant: Callable[..., Awaitable[str] | str] = current_tenant,
    use_case: Callable[[type[Any]], Any] = from_dishka,
    limited: Callable[[Group], Any] = rate_limited,
    route_class: type[APIRoute] = JobsRoute,
    prefix: str = "/jobs",
    tags: Sequence[str] = ("jobs",),
) -> APIRouter:
    """The jobs routes, every one scoped to the tenant that the dependency `tenant`
    returns. A route takes its use case of type ``kind`` as
    ``Annotated[kind, use_case(kind)]`` and its rate limit as the dependency
    ``limited(group)``. The defaults are jobrail's API: the tenant of the request's API
    key, the use cases from the app's dishka container, the app's rate limits."""
    router = APIRouter(
        prefix=prefix,
        tags=list(tags),
        route_class=route_class,
        responses=ERROR_RESPONSES,
    )
    Tenant = Annotated[TenantId, Depends(tenant)]  # noqa: N806

    @router.post(
        "",
        status_code=202,
        summary="Enqueue a job of a type open to tenants",
        description=EnqueueOpenJob.__doc__,
        dependencies=[limited("enqueue")],
        openapi_extra=IDEMPOTENCY_KEY_OPENAPI,
    )
    async def enqueue_job(
        body: JobRequest,
        request: Request,
        response: Response,
        tenant: Tenant,
        enqueue: Annotated[EnqueueOpenJob, use_case(EnqueueOpenJob)],
        clock: Annotated[Clock, use_case(Clock)],
    ) -> JobAccepted:
        cmd = body.command(
            clock,
            tenant_id=tenant,
            type=body.type,
            payload=body.payload,
            idempotency_key=idempotency_key(request),
            entity_id=body.entity_id,
        )
        # Its Location is under this route's own path, wherever the host put the routes.
        return accepted(await enqueue(cmd), response, request, _path(request, prefix))

    @router.get("/{job_id}", summary="A job and its status", dependencies=[limited("read")])
    async def get_job(
        job_id: uuid.UUID,
        tenant: Tenant,
        get: Annotated[GetJob, use_case(GetJob)],
        flows: Annotated[FlowService, use_case(FlowService)],
    ) -> JobOut:
        job = await get(GetJobQuery(tenant_id=tenant, job_id=JobId(job_id)))
        view = None
        if job.flow is not None:  # a member or callback of a batch or chain shows it
            try:
                view = await flows.get(tenant, job.flow.flow_id)
            except NotFoundError:
                view = None  # the flow's row is gone (retention): the job still shows
        return JobOut.of(job, view, await get.standing_of(job))

    @router.get("", summary="Jobs, newest first", dependencies=[limited("read")])
    async def list_jobs(
        tenant: Tenant, list_jobs: Annotated[ListJobs, use_case(ListJobs)], query: JobFilterQuery
    ) -> JobList:
        return await jobs_page(list_jobs, tenant, query)

    @router.post(
        "/bulk/cancel",
        summary="Cancel every job a filter takes",
        description=CancelJobs.__doc__,
        # As a single cancel. Not /jobs/cancel: `GET /jobs/{job_id}` would take that path.
        dependencies=[limited("read")],
    )
    async def cancel_jobs(
        body: CancelJobsIn, tenant: Tenant, cancel: Annotated[CancelJobs, use_case(CancelJobs)]
    ) -> CancelledJobsOut:
        return CancelledJobsOut.of(await cancel(body.command(tenant)))

    @router.post(
        "/{job_id}/cancel",
        summary="Cancel a job",
        description=CancelJob.__doc__,
        # The read budget: a cancel enqueues nothing, and an operator cancelling a
        # backlog must not run out of the tenant's enqueue budget (30 a minute) doing it.
        dependencies=[limited("read")],
    )
    async def cancel_job(
        job_id: uuid.UUID,
        tenant: Tenant,
        cancel: Annotated[CancelJob, use_case(CancelJob)],
    ) -> JobOut:
        return JobOut.of(await cancel(CancelJobCommand(tenant_id=tenant, job_id=JobId(job_id))))

    return router


def _path(request: Request, default: str) -> str:
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else default


router = jobs_router()
