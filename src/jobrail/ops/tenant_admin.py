"""The admin routes that set a tenant's settings: its cap on jobs waiting to start, and
its weight under fair dispatch (under ``/admin``, admin keys only)."""

from typing import Annotated

from dishka.integrations.fastapi import FromDishka
from fastapi import Path
from pydantic import BaseModel, Field

from jobrail.http.schemas import RequestModel
from jobrail.kernel.ids import TenantId
from jobrail.ops.admin_routes import admin_router
from jobrail.tenants.domain import MAX_QUEUED_CAP, MAX_WEIGHT, MIN_WEIGHT
from jobrail.tenants.use_cases import SetQueuedCap, SetTenantWeight

router = admin_router()


class QueuedCapIn(RequestModel):
    max_queued: int | None = Field(
        ge=1,
        le=MAX_QUEUED_CAP,
        description="At most this many of the tenant's jobs wait to start (pending, "
        "retrying); null: no cap.",
    )


class QueuedCapOut(BaseModel):
    tenant_id: str
    max_queued: int | None


@router.put(
    "/tenants/{tenant_id}/max-queued",
    summary="Cap a tenant's jobs waiting to start",
    description="Beyond the cap, the tenant's enqueues are refused with 429 "
    "(`queued_cap`, with the cap) until some of its jobs start; the jobs already "
    "queued stay. As `jobrail tenants set-cap`.",
)
async def set_queued_cap(
    tenant_id: Annotated[str, Path(min_length=1, max_length=64)],
    body: QueuedCapIn,
    set_cap: FromDishka[SetQueuedCap],
) -> QueuedCapOut:
    tenant = await set_cap(TenantId(tenant_id), body.max_queued)
    return QueuedCapOut(tenant_id=tenant.id, max_queued=tenant.max_queued)


class WeightIn(RequestModel):
    weight: float | None = Field(
        ge=MIN_WEIGHT,
        le=MAX_WEIGHT,
        allow_inf_nan=False,
        description="The tenant's share of a queue's workers under fair dispatch, relative "
        "to the other tenants with jobs waiting there; null: the default, 1.",
    )


class WeightOut(BaseModel):
    tenant_id: str
    weight: float | None


@router.put(
    "/tenants/{tenant_id}/weight",
    summary="Set a tenant's weight under fair dispatch",
    description="Among the tenants with jobs waiting in a queue, each gets a share of its "
    "workers in proportion to its weight (JOBRAIL_DISPATCH__ENABLED). The dispatchers "
    "read it within a second, for the jobs already waiting too. As `jobrail tenants "
    "set-weight`.",
)
async def set_tenant_weight(
    tenant_id: Annotated[str, Path(min_length=1, max_length=64)],
    body: WeightIn,
    set_weight: FromDishka[SetTenantWeight],
) -> WeightOut:
    tenant = await set_weight(TenantId(tenant_id), body.weight)
    return WeightOut(tenant_id=tenant.id, weight=tenant.weight)
