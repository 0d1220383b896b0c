"""Operator endpoints. Every route here needs an admin API key."""

from typing import Annotated

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from jobrail.api.auth import require_admin
from jobrail.api.errors import ADMIN_ERROR_RESPONSES
from jobrail.api.rate_limits import RateLimitRead
from jobrail.limits.admin import LimitsAdmin

router = APIRouter(
    prefix="/admin",
    tags=["admin"],
    route_class=DishkaRoute,
    responses=ADMIN_ERROR_RESPONSES,
    dependencies=[Depends(require_admin), RateLimitRead],
)

LimitKey = Annotated[
    str,
    Query(
        min_length=1,
        max_length=255,
        description="The limit's key as the job filled it in, e.g. `account:42`.",
    ),
]


class LimitStateOut(BaseModel):
    job_type: str
    limit: str
    kind: str
    key: str
    allowed: bool
    remaining: float
    retry_after_s: float


class LimitReset(BaseModel):
    job_type: str
    limit: str
    key: str
    reset: bool


@router.get("/limits/{job_type}/{limit}", summary="Peek at a job type's limit for one key")
async def peek_limit(
    job_type: str, limit: str, key: LimitKey, limits: FromDishka[LimitsAdmin]
) -> LimitStateOut:
    state = await limits.peek(job_type, limit, key)
    return LimitStateOut(
        job_type=state.job_type,
        limit=state.limit,
        kind=state.kind,
        key=state.key,
        allowed=state.allowed,
        remaining=state.remaining,
        retry_after_s=state.retry_after_s,
    )


@router.post(
    "/limits/{job_type}/{limit}/reset",
    summary="Clear a job type's limit for one key (frees a stuck lock)",
)
async def reset_limit(
    job_type: str, limit: str, key: LimitKey, limits: FromDishka[LimitsAdmin]
) -> LimitReset:
    await limits.reset(job_type, limit, key)
    return LimitReset(job_type=job_type, limit=limit, key=key, reset=True)
