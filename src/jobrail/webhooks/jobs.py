"""The delivery job: one event to one webhook. A receiver that keeps failing is retried
8 times with the platform's backoff (JOBRAIL_RETRY__*), then dead-lettered, and can be
redriven like any job."""

import uuid

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict, Field

from jobrail.jobs.registry import job
from jobrail.limits.model import TokenBucket
from jobrail.webhooks.use_cases import DeliverWebhook
from jobrail.worker.context import JobContext


class Delivery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    webhook_id: uuid.UUID
    event_id: str = Field(max_length=64)


@job(
    "webhooks.deliver",
    payload=Delivery,
    queue="jobs.io",
    timeout_s=30,
    max_attempts=8,
    # No receiver gets more than 10 deliveries a second (bursts of 20) from jobrail.
    limits=[TokenBucket("receiver", key="webhook:{webhook_id}", capacity=20, per_second=10)],
)
async def deliver(
    payload: Delivery, ctx: JobContext, send: FromDishka[DeliverWebhook]
) -> dict[str, object]:
    """POST the event to the webhook, signed (Standard Webhooks headers)."""
    done = await send(ctx.tenant_id, payload.webhook_id, payload.event_id, str(ctx.job_id))
    return {"status": done.status, "skipped": done.skipped}
