"""A tenant's webhooks: register one (its secret is shown once), list, delete."""

import uuid
from datetime import datetime
from typing import Annotated

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from jobrail.events.feed import EVENT_NAMES
from jobrail.http.auth import CurrentTenant
from jobrail.http.errors import ERROR_RESPONSES, JsonErrorsRoute
from jobrail.http.rate_limits import RateLimitEnqueue, RateLimitRead
from jobrail.http.schemas import RequestModel
from jobrail.webhooks.domain import DEFAULT_EVENTS, MAX_URL_LENGTH, Webhook
from jobrail.webhooks.use_cases import RegisterWebhookCommand, Webhooks


class WebhooksRoute(JsonErrorsRoute, DishkaRoute):
    """Answers its errors as JSON itself (as the jobs routes do)."""


router = APIRouter(
    prefix="/webhooks", tags=["webhooks"], route_class=WebhooksRoute, responses=ERROR_RESPONSES
)


class WebhookIn(RequestModel):
    url: Annotated[str, Field(max_length=MAX_URL_LENGTH, description="http(s) URL to POST to.")]
    events: list[Annotated[str, Field(max_length=16)]] | None = Field(
        default=None,
        max_length=len(EVENT_NAMES),
        description=f"Event names to receive, of {', '.join(EVENT_NAMES)}; default "
        f"{', '.join(DEFAULT_EVENTS)}.",
    )
    secret: Annotated[str, Field(max_length=128)] | None = Field(
        default=None, description="whsec_ and base64 of 24 to 64 bytes; made if left out."
    )


class WebhookOut(BaseModel):
    id: uuid.UUID
    url: str
    events: list[str]
    created_at: datetime

    @classmethod
    def of(cls, webhook: Webhook) -> "WebhookOut":
        return cls(
            id=webhook.id,
            url=webhook.url,
            events=list(webhook.events),
            created_at=webhook.created_at,
        )


class WebhookCreated(WebhookOut):
    secret: str = Field(
        description="Shown this once: check each delivery's webhook-signature with it "
        "(Standard Webhooks)."
    )


class WebhookList(BaseModel):
    items: list[WebhookOut]


def _own_hosts(request: Request) -> list[tuple[str, int]]:
    """Where this API is reached: the request's host and the address it came in on."""
    default = 443 if request.url.scheme == "https" else 80
    hosts = [(request.url.hostname or "", request.url.port or default)]
    server = request.scope.get("server")
    if server and server[1] is not None:
        hosts.append((str(server[0]), int(server[1])))
    return hosts


@router.post("", status_code=201, summary="Register a webhook", dependencies=[RateLimitEnqueue])
async def register_webhook(
    body: WebhookIn, request: Request, tenant: CurrentTenant, hooks: FromDishka[Webhooks]
) -> WebhookCreated:
    webhook = await hooks.register(
        RegisterWebhookCommand(
            tenant_id=tenant,
            url=body.url,
            events=body.events,
            secret=body.secret,
            own_hosts=_own_hosts(request),
        )
    )
    return WebhookCreated(**WebhookOut.of(webhook).model_dump(), secret=webhook.secret)


@router.get("", summary="The tenant's webhooks", dependencies=[RateLimitRead])
async def list_webhooks(tenant: CurrentTenant, hooks: FromDishka[Webhooks]) -> WebhookList:
    return WebhookList(items=[WebhookOut.of(w) for w in await hooks.of_tenant(tenant)])


@router.get("/{webhook_id}", summary="A webhook", dependencies=[RateLimitRead])
async def get_webhook(
    webhook_id: uuid.UUID, tenant: CurrentTenant, hooks: FromDishka[Webhooks]
) -> WebhookOut:
    return WebhookOut.of(await hooks.get(tenant, webhook_id))


@router.delete(
    "/{webhook_id}",
    status_code=204,
    summary="Delete a webhook",
    description="Nothing more is delivered to it, deliveries already enqueued included.",
    dependencies=[RateLimitEnqueue],
)
async def delete_webhook(
    webhook_id: uuid.UUID, tenant: CurrentTenant, hooks: FromDishka[Webhooks]
) -> Response:
    await hooks.delete(tenant, webhook_id)
    return Response(status_code=204)
