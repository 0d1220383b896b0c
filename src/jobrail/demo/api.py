from typing import Annotated

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Header, Request, Response

from jobrail.api.errors import ERROR_RESPONSES
from jobrail.api.rate_limits import EnqueueTenant
from jobrail.api.schemas import JobAccepted, accepted
from jobrail.demo.jobs import EchoPayload
from jobrail.demo.jobs import echo as echo_job
from jobrail.jobs.use_cases import EnqueueJob, EnqueueJobCommand

router = APIRouter(
    prefix="/demo", tags=["demo"], route_class=DishkaRoute, responses=ERROR_RESPONSES
)


@router.post(
    "/echo",
    status_code=202,
    summary="Enqueue a demo job that echoes a message",
    description="Poll `GET /jobs/{job_id}` for its status and result.",
)
async def echo(
    body: EchoPayload,
    request: Request,
    response: Response,
    tenant: EnqueueTenant,
    enqueue: FromDishka[EnqueueJob],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
) -> JobAccepted:
    result = await enqueue(
        EnqueueJobCommand(
            tenant_id=tenant,
            type=echo_job.name,
            payload=body,
            idempotency_key=idempotency_key,
        )
    )
    return accepted(result, response, request)
