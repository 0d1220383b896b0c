"""Notifications' job types: consumers of integration events."""

from dishka import FromDishka

from contexts.notifications.adapters.settings import NotificationsSettings
from contexts.notifications.application.use_cases import (
    SendMonthEndSummary,
    SendMonthEndSummaryCommand,
    SendReceipt,
    SendReceiptCommand,
)
from contexts.shared.events import InvoicePaidV1, MonthEndRunFinishedV1
from jobrail import EventCatalog, EventDelivery, JobContext, Lock, TokenBucket, job

_settings = NotificationsSettings()

EMAIL_PROVIDER = TokenBucket(
    "email-provider",
    key="email-provider",
    capacity=_settings.provider_burst,
    per_second=_settings.provider_rate_per_s,
)


@job(
    "notifications.send_receipt",
    payload=EventDelivery,
    queue="jobs.io",
    timeout_s=60,
    max_attempts=8,
    limits=[EMAIL_PROVIDER],
    # Two deliveries of one event never send at the same time. The lock's key names the
    # provider as its owner: in a Redis Cluster it must share the bucket's slot, as both
    # are acquired in one step (see jobrail.limits.model.hash_tagged).
    lock=Lock(key="receipt:email-provider:{event_id}", ttl_s=30),
)
async def send_receipt(
    payload: EventDelivery,
    ctx: JobContext,
    send: FromDishka[SendReceipt],
    events: FromDishka[EventCatalog],
) -> dict[str, str]:
    """On invoice.paid.v1: e-mail the receipt (once per event)."""
    paid = events.load(payload, InvoicePaidV1)
    notification = await send(
        SendReceiptCommand(
            tenant_id=paid.tenant_id,
            event_id=payload.event_id,
            invoice_id=paid.invoice_id,
            recipient=paid.customer_email,
            amount_minor=paid.amount_minor,
            currency=paid.currency,
        )
    )
    return {"notification_id": str(notification.id), "status": notification.status.value}


@job(
    "notifications.send_month_end_summary",
    payload=EventDelivery,
    queue="jobs.io",
    timeout_s=60,
    max_attempts=8,
    limits=[EMAIL_PROVIDER],
    lock=Lock(key="month-end-summary:email-provider:{event_id}", ttl_s=30),
)
async def send_month_end_summary(
    payload: EventDelivery,
    ctx: JobContext,
    send: FromDishka[SendMonthEndSummary],
    events: FromDishka[EventCatalog],
) -> dict[str, str]:
    """On month_end_run.finished.v1: e-mail the run's summary (once per event)."""
    finished = events.load(payload, MonthEndRunFinishedV1)
    notification = await send(
        SendMonthEndSummaryCommand(
            tenant_id=finished.tenant_id,
            event_id=payload.event_id,
            month=finished.month,
            recipient=finished.report_to,
            due=finished.due,
            issued=finished.issued,
            failed=finished.failed,
        )
    )
    return {"notification_id": str(notification.id), "status": notification.status.value}
