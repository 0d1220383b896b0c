"""Notifications' use cases."""

from dataclasses import dataclass

from contexts.notifications.application.ports import (
    EmailMessage,
    EmailSender,
    NotificationsUnitOfWork,
)
from contexts.notifications.domain.notification import Notification, NotificationId
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError, PermanentError, TransientError
from jobrail.kernel.ids import TenantId, new_id

RECEIPT = "receipt"
RECEIPT_CONSUMER = "notifications.receipt"
MONTH_END_SUMMARY = "month_end_summary"
MONTH_END_SUMMARY_CONSUMER = "notifications.month_end_summary"


@dataclass(frozen=True, slots=True)
class SendReceiptCommand:
    tenant_id: TenantId
    event_id: str
    invoice_id: str
    recipient: str
    amount_minor: int
    currency: str


@dataclass(frozen=True, slots=True)
class _Delivery:
    """A notification to send once per event: the inbox consumer that takes the event,
    the template, who it goes to, what it is about, and its message."""

    consumer: str
    template: str
    tenant_id: TenantId
    event_id: str
    recipient: str
    subject_id: str
    subject: str
    body: str


class _SendOnce:
    """Send a notification for an event, once.

    - The event is taken once (inbox): a redelivered event sends nothing new.
    - A notification that could not be sent is retried until it is sent or fails for
      good; one that failed for good is sent again when its job is redriven.
    - The message id is the notification's id, so a provider can drop a resend.
    """

    def __init__(self, uow: NotificationsUnitOfWork, sender: EmailSender, clock: Clock) -> None:
        self._uow = uow
        self._sender = sender
        self._clock = clock

    async def _send(self, delivery: _Delivery) -> Notification:
        notification = await self._accept(delivery)
        if notification.is_sent:
            return notification
        notification.reopen()
        message = EmailMessage(
            message_id=str(notification.id),
            recipient=notification.recipient,
            subject=delivery.subject,
            body=delivery.body,
        )
        try:
            await self._sender.send(message)
        except (TransientError, PermanentError) as exc:
            async with self._uow:
                notification.sending_failed(str(exc), permanent=isinstance(exc, PermanentError))
                await self._uow.notifications.save(notification)
                await self._uow.commit()
            raise
        async with self._uow:
            notification.sent(self._clock.now())
            await self._uow.notifications.save(notification)
            await self._uow.commit()
        return notification

    async def _accept(self, delivery: _Delivery) -> Notification:
        async with self._uow:
            if await self._uow.inbox.accept(delivery.consumer, delivery.event_id):
                notification = Notification(
                    id=NotificationId(new_id()),
                    tenant_id=delivery.tenant_id,
                    recipient=delivery.recipient,
                    template=delivery.template,
                    subject_id=delivery.subject_id,
                    source_event_id=delivery.event_id,
                    created_at=self._clock.now(),
                )
                await self._uow.notifications.add(notification)
                await self._uow.commit()
                return notification
            existing = await self._uow.notifications.by_source(
                delivery.tenant_id, delivery.template, delivery.event_id
            )
            # A duplicate renews the inbox row's time (see SqlaInbox): keep that renewal.
            await self._uow.commit()
        if existing is None:
            raise PermanentError(f"event {delivery.event_id} was taken but has no notification")
        return existing


class SendReceipt(_SendOnce):
    """Send the receipt for a paid invoice, once.

    - The paid event is taken once (inbox): a redelivered event sends nothing new.
    - A receipt that could not be sent is retried until it is sent or fails for good;
      a receipt that failed for good is sent again when its job is redriven.
    - The message id is the notification's id, so a provider can drop a resend.
    """

    async def __call__(self, cmd: SendReceiptCommand) -> Notification:
        amount = f"{cmd.amount_minor // 100}.{cmd.amount_minor % 100:02d} {cmd.currency}"
        return await self._send(
            _Delivery(
                consumer=RECEIPT_CONSUMER,
                template=RECEIPT,
                tenant_id=cmd.tenant_id,
                event_id=cmd.event_id,
                recipient=cmd.recipient,
                subject_id=cmd.invoice_id,
                subject=f"Receipt for invoice {cmd.invoice_id}",
                body=f"Thank you for your payment of {amount}.\n\nInvoice: {cmd.invoice_id}\n",
            )
        )


@dataclass(frozen=True, slots=True)
class SendMonthEndSummaryCommand:
    tenant_id: TenantId
    event_id: str
    month: str
    recipient: str
    due: int
    issued: int
    failed: int


class SendMonthEndSummary(_SendOnce):
    """Tell the tenant how its month-end run went: one e-mail per run, with how many
    invoices were due, issued and not issued (sent once, as a receipt is)."""

    async def __call__(self, cmd: SendMonthEndSummaryCommand) -> Notification:
        return await self._send(
            _Delivery(
                consumer=MONTH_END_SUMMARY_CONSUMER,
                template=MONTH_END_SUMMARY,
                tenant_id=cmd.tenant_id,
                event_id=cmd.event_id,
                recipient=cmd.recipient,
                subject_id=cmd.month,
                subject=f"Month-end run {cmd.month}: {cmd.issued} of {cmd.due} invoices issued",
                body=(
                    f"The month-end run of {cmd.month} has finished.\n\n"
                    f"Invoices due: {cmd.due}\nIssued: {cmd.issued}\nNot issued: {cmd.failed}\n"
                ),
            )
        )


@dataclass(frozen=True, slots=True)
class ListNotificationsQuery:
    tenant_id: TenantId
    invoice_id: str | None = None
    limit: int = 50


class ListNotifications:
    """The tenant's notifications, newest first, optionally for one invoice."""

    def __init__(self, uow: NotificationsUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, query: ListNotificationsQuery) -> list[Notification]:
        if not 1 <= query.limit <= 200:
            raise InvalidInputError("limit must be between 1 and 200")
        async with self._uow:
            return await self._uow.notifications.list(
                query.tenant_id, subject_id=query.invoice_id, limit=query.limit
            )
