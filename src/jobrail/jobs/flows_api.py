"""Batches and chains: their state and counts, and cancelling one as a whole.

A cancel is charged to the tenant's read budget, as a job's is (``jobrail.jobs.api``):
it enqueues nothing."""

import uuid

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter

from jobrail.http.auth import CurrentTenant
from jobrail.http.errors import ERROR_RESPONSES, JsonErrorsRoute
from jobrail.http.rate_limits import RateLimitRead
from jobrail.jobs.flow import FlowKind
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.schemas import FlowOut
from jobrail.jobs.workflows import FlowView
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import TenantId


class FlowsRoute(JsonErrorsRoute, DishkaRoute):
    """Answers its errors as JSON itself (as the jobs routes do)."""


router = APIRouter(tags=["batches and chains"], route_class=FlowsRoute, responses=ERROR_RESPONSES)


async def _of_kind(
    flows: FlowService, tenant: TenantId, flow_id: uuid.UUID, kind: FlowKind
) -> FlowView:
    view = await flows.get(tenant, flow_id)
    if view.flow.kind is not kind:
        raise NotFoundError(f"{kind.value} {flow_id} not found")
    return view


@router.get("/batches/{batch_id}", summary="A batch and its counts", dependencies=[RateLimitRead])
async def get_batch(
    batch_id: uuid.UUID, tenant: CurrentTenant, flows: FromDishka[FlowService]
) -> FlowOut:
    return FlowOut.of(await _of_kind(flows, tenant, batch_id, FlowKind.BATCH))


@router.get("/chains/{chain_id}", summary="A chain and its counts", dependencies=[RateLimitRead])
async def get_chain(
    chain_id: uuid.UUID, tenant: CurrentTenant, flows: FromDishka[FlowService]
) -> FlowOut:
    return FlowOut.of(await _of_kind(flows, tenant, chain_id, FlowKind.CHAIN))


@router.post(
    "/batches/{batch_id}/cancel",
    summary="Cancel a batch",
    description="Every member that has not started is cancelled, the running ones are "
    "asked to stop at their next checkpoint, and the batch takes no more jobs. Its "
    "`finally` callback runs once every member has ended; its `then` never does. A "
    "finished batch is a conflict (409).",
    dependencies=[RateLimitRead],
)
async def cancel_batch(
    batch_id: uuid.UUID, tenant: CurrentTenant, flows: FromDishka[FlowService]
) -> FlowOut:
    await _of_kind(flows, tenant, batch_id, FlowKind.BATCH)
    return FlowOut.of(await flows.cancel(tenant, batch_id))


@router.post(
    "/chains/{chain_id}/cancel",
    summary="Cancel a chain",
    description="Its step that has not started and every later step are cancelled; a "
    "running step is asked to stop at its next checkpoint. A finished chain is a "
    "conflict (409).",
    dependencies=[RateLimitRead],
)
async def cancel_chain(
    chain_id: uuid.UUID, tenant: CurrentTenant, flows: FromDishka[FlowService]
) -> FlowOut:
    await _of_kind(flows, tenant, chain_id, FlowKind.CHAIN)
    return FlowOut.of(await flows.cancel(tenant, chain_id))
