"""The FastAPI dependency that applies the API rate limits of a route group."""

from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import Depends, HTTPException, Request, Response

from jobrail.api.auth import CurrentTenant
from jobrail.limits.api import ApiRateLimiter
from jobrail.limits.model import LimitsUnavailableError

Group = Literal["enqueue", "read"]


class RateLimitedError(HTTPException):
    pass


def rate_limit(group: Group) -> Callable[..., Awaitable[None]]:
    """Depend on this in a route (or router) to rate-limit it as part of `group`."""

    async def check(request: Request, response: Response, tenant: CurrentTenant) -> None:
        limiter: ApiRateLimiter = request.app.state.api_limiter
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

    return check


RateLimitEnqueue = Depends(rate_limit("enqueue"))
RateLimitRead = Depends(rate_limit("read"))
