import uuid

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Request, Response
from pydantic import Field

from jobrail.demo.jobs import EchoPayload, batch_sum
from jobrail.demo.jobs import echo as echo_job
from jobrail.http.errors import ERROR_RESPONSES
from jobrail.http.rate_limits import EnqueueTenant
from jobrail.http.schemas import IDEMPOTENCY_KEY_OPENAPI, RequestModel, idempotency_key
from jobrail.jobs.domain import FlowRole
from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.options import ENQUEUE_OPENAPI, EnqueueOptionsQuery, app_clock
from jobrail.jobs.schemas import JobAccepted, accepted
from jobrail.jobs.workflows import BatchCommand, FlowJob

router = APIRouter(
    prefix="/demo", tags=["demo"], route_class=DishkaRoute, responses=ERROR_RESPONSES
)


@router.post(
    "/echo",
    status_code=202,
    summary="Enqueue a demo job that echoes a message",
    description="Poll `GET /jobs/{job_id}` for its status and result. The query's "
    "enqueue options put it off (`delay`, `run_at`), give it a `deadline` or a "
    "`unique_key`.",
    openapi_extra=ENQUEUE_OPENAPI,
)
async def echo(
    body: EchoPayload,
    request: Request,
    response: Response,
    tenant: EnqueueTenant,
    options: EnqueueOptionsQuery,
    enqueue: FromDishka[EnqueueJob],
) -> JobAccepted:
    cmd = options.command(
        await app_clock(request, options),
        tenant_id=tenant,
        type=echo_job.name,
        payload=body,
        idempotency_key=idempotency_key(request),
    )
    return accepted(await enqueue(cmd), response, request)


class DemoBatch(RequestModel):
    count: int = Field(ge=1, le=100, description="How many echo jobs (a demo: at most 100).")
    fail_times: int = Field(default=0, ge=0, le=100, description="Each fails this often first.")
    sleep_ms: int = Field(default=0, ge=0, le=60_000, description="Each sleeps this long.")


class BatchAccepted(RequestModel):
    batch_id: uuid.UUID
    job_ids: list[uuid.UUID]
    then_job_id: uuid.UUID


@router.post(
    "/batch",
    status_code=202,
    summary="Start a demo batch of echo jobs",
    description="`count` echo jobs (job i returns the value i), and a `then` callback "
    "that records the sum of their values once all have succeeded. Poll "
    "`GET /batches/{batch_id}` for its counts, `GET /jobs/{then_job_id}` for the sum.",
    openapi_extra=IDEMPOTENCY_KEY_OPENAPI,
)
async def batch(
    body: DemoBatch,
    request: Request,
    response: Response,
    tenant: EnqueueTenant,
    flows: FromDishka[FlowService],
) -> BatchAccepted:
    started = await flows.batch(
        BatchCommand(
            tenant_id=tenant,
            jobs=[
                FlowJob(
                    echo_job.name,
                    {
                        "message": f"member {i}",
                        "value": i,
                        "fail_times": body.fail_times,
                        "sleep_ms": body.sleep_ms,
                    },
                )
                for i in range(body.count)
            ],
            then=FlowJob(batch_sum.name, {}),
            idempotency_key=idempotency_key(request),
            name="demo batch",
        )
    )
    response.headers["Location"] = str(request.url_for("get_batch", batch_id=started.flow.id))
    if not started.created:
        response.headers["Idempotent-Replayed"] = "true"
    then = started.callbacks[FlowRole.THEN]
    return BatchAccepted(
        batch_id=started.flow.id, job_ids=[job.id for job in started.members], then_job_id=then.id
    )
