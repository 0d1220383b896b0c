"""The jobs routes of ``JobRail.router``: status, list, cancel (jobrail's own, from
``jobrail.jobs.api.jobs_router``) and a job's events, for the host's app.

The routes take their use cases from the rail's container (the host need not set up
dishka) and their tenant from the host's own dependency, or else from jobrail's API
keys. Every error they raise is answered as JSON by the route itself, so a host that
installed none of jobrail's error handlers answers them as jobrail's app does.
"""

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Protocol, TypeVar

from dishka import AsyncContainer
from fastapi import APIRouter, Depends, Request, Response

from jobrail.events.api import (
    STREAM_RESPONSES,
    After,
    LastEventId,
    Limit,
    event_cursor,
    job_events_response,
)
from jobrail.events.use_cases import JobEvents
from jobrail.http.auth import ApiServices, BearerCredentials, authenticated
from jobrail.http.errors import JsonErrorsRoute
from jobrail.http.rate_limits import Group, apply_rate_limit
from jobrail.jobs import api as jobs_api
from jobrail.jobs.get import GetJob
from jobrail.kernel.ids import JobId, TenantId
from jobrail.limits.api import ApiRateLimiter
from jobrail.runtime.outages import outage

T = TypeVar("T")


class RailServices(Protocol):
    """What the routes take from the rail (``JobRail``): its container, built anew for
    each lifespan, and the lookup and throttle of jobrail's API keys."""

    @property
    def container(self) -> AsyncContainer: ...

    async def api_services(self) -> ApiServices: ...


class RailRoute(JsonErrorsRoute):
    """Every error is JSON, an unexpected one a logged 500 too, and a driver's error that
    says its service is away a 503, in the host's app as in jobrail's."""

    catch_all = True
    outage = staticmethod(outage)


def jobs_router(
    rail: RailServices,
    *,
    tenant: Callable[..., Awaitable[str] | str] | None,
    prefix: str,
    tags: list[str],
) -> APIRouter:
    who = tenant or _api_key_tenant(rail)
    Tenant = Annotated[TenantId, Depends(who)]  # noqa: N806

    def use_case(kind: type[T]) -> Any:
        async def resolve(request: Request) -> AsyncIterator[T]:
            async with rail.container(context={Request: request}) as scope:
                yield await scope.get(kind)

        return Depends(resolve)

    def limited(group: Group) -> Any:
        async def check(request: Request, response: Response, tenant: Tenant) -> None:
            limiter = await rail.container.get(ApiRateLimiter)
            await apply_rate_limit(group, request, response, tenant, limiter)

        return Depends(check)

    router = jobs_api.jobs_router(
        tenant=who,
        use_case=use_case,
        limited=limited,
        route_class=RailRoute,
        prefix=prefix,
        tags=tags,
    )

    @router.get(
        "/{job_id}/events",
        summary="A job's events",
        description="As jobrail's GET /jobs/{id}/events: Server-Sent Events with "
        "Last-Event-ID resume when the request accepts text/event-stream, else a JSON page.",
        dependencies=[limited("read")],
        responses=STREAM_RESPONSES,
    )
    async def job_events(
        job_id: uuid.UUID,
        request: Request,
        tenant: Tenant,
        get: Annotated[GetJob, use_case(GetJob)],
        last_event_id: LastEventId = None,
        after: After = None,
        limit: Limit = 100,
    ) -> Response:
        feed = await rail.container.get(JobEvents)
        cursor = event_cursor(last_event_id, after)
        return await job_events_response(request, tenant, JobId(job_id), get, feed, cursor, limit)

    return router


def _api_key_tenant(rail: RailServices) -> Callable[..., Awaitable[TenantId]]:
    """jobrail's API keys as the tenant dependency: ``Authorization: Bearer <key>``."""

    async def api_key_tenant(request: Request, credentials: BearerCredentials) -> TenantId:
        principal = await authenticated(request, credentials, await rail.api_services())
        return principal.tenant_id

    return api_key_tenant
