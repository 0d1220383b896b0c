import uuid
from datetime import datetime
from typing import Annotated, Literal

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from contexts.notifications.application.use_cases import (
    ListNotifications,
    ListNotificationsQuery,
)
from contexts.notifications.domain.notification import Notification
from jobrail.web import ERROR_RESPONSES, CurrentTenant, RateLimitRead

router = APIRouter(
    prefix="/notifications",
    tags=["notifications"],
    route_class=DishkaRoute,
    responses=ERROR_RESPONSES,
)


class NotificationOut(BaseModel):
    id: uuid.UUID
    template: str
    recipient: str
    subject_id: str = Field(
        description="What it is about: the invoice of a receipt, the month of a month-end summary."
    )
    invoice_id: str = Field(description="The same as subject_id (kept for receipts).")
    status: Literal["pending", "sent", "failed"]
    attempts: int
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None

    @classmethod
    def of(cls, notification: Notification) -> "NotificationOut":
        return cls(
            id=notification.id,
            template=notification.template,
            recipient=notification.recipient,
            subject_id=notification.subject_id,
            invoice_id=notification.subject_id,
            status=notification.status.value,
            attempts=notification.attempts,
            last_error=notification.last_error,
            created_at=notification.created_at,
            sent_at=notification.sent_at,
        )


class NotificationList(BaseModel):
    items: list[NotificationOut]


@router.get("", summary="What was sent, and its status", dependencies=[RateLimitRead])
async def list_notifications(
    tenant: CurrentTenant,
    list_notifications: FromDishka[ListNotifications],
    invoice_id: Annotated[str | None, Query(max_length=255)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> NotificationList:
    items = await list_notifications(
        ListNotificationsQuery(tenant_id=tenant, invoice_id=invoice_id, limit=limit)
    )
    return NotificationList(items=[NotificationOut.of(n) for n in items])
