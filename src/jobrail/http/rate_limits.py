"""The FastAPI dependency that applies the API rate limits of a route group."""

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, Response
from fastapi.security import HTTPBearer

from jobrail.http.auth import (
    API_KEY_DESCRIPTION,
    API_KEY_SCHEME,
    CurrentTenant,
    app_service,
    authenticated,
    state_service,
)
from jobrail.kernel.ids import TenantId
from jobrail.limits.api import ApiRateLimiter
from jobrail.limits.model import LimitsUnavailableError

Group = Literal["enqueue", "read"]


class RateLimitedError(HTTPException):
    pass


def rate_limit(group: Group) -> Callable[..., Awaitable[None]]:
    """Depend on this in a route (or router) to rate-limit it as part of `group`."""

    async def check(request: Request, response: Response, tenant: CurrentTenant) -> None:
        await apply_rate_limit(group, request, response, tenant)

    return check


class RateLimitedTenant(HTTPBearer):
    """The request's tenant, authenticated and then rate-limited as part of `group`: what
    `CurrentTenant` plus `rate_limit(group)` do, in one dependency. FastAPI's cost is
    per dependency and per request, and the pair is four (this, the tenant, the
    principal, the bearer scheme) where this is one: it is the bearer scheme itself, so
    OpenAPI shows the same ApiKey scheme on its routes. A hot route takes this."""

    def __init__(self, group: Group) -> None:
        super().__init__(
            auto_error=False, scheme_name=API_KEY_SCHEME, description=API_KEY_DESCRIPTION
        )
        self.group = group

    async def __call__(  # type: ignore[override]
        self, request: Request, response: Response
    ) -> TenantId:
        principal = await authenticated(request, await super().__call__(request))
        await apply_rate_limit(self.group, request, response, principal.tenant_id)
        return principal.tenant_id


async def apply_rate_limit(
    group: Group,
    request: Request,
    response: Response,
    tenant: TenantId,
    limiter: ApiRateLimiter | None = None,
) -> None:
    """A 429 past the limits of `group` (a 503 where they cannot be checked and the
    group fails closed); otherwise the response carries the RateLimit-* headers. The
    limiter is the app's unless given."""
    if limiter is None:
        # The app's, from its state without a coroutine on the hot path.
        limiter = state_service(request, "api_limiter")
        if limiter is None:
            limiter = await app_service(request, "api_limiter", ApiRateLimiter)
    if not limiter.enabled:
        return
    try:
        decision = await limiter.check(group, tenant=tenant)
    except LimitsUnavailableError:
        if limiter.fails_open(group):
            return
        limiter.count_unavailable()
        raise HTTPException(
            503, "rate limits cannot be checked right now", headers={"Retry-After": "5"}
        ) from None
    if decision is None:
        return
    if not decision.allowed:
        raise RateLimitedError(
            429, f"too many requests: the limit is {decision.rule}", headers=decision.headers()
        )
    response.headers.update(decision.headers())


RateLimitEnqueue = Depends(rate_limit("enqueue"))
RateLimitRead = Depends(rate_limit("read"))
EnqueueTenant = Annotated[TenantId, Depends(RateLimitedTenant("enqueue"))]
