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


@dataclass(frozen=True, slots=True)
class SendReceiptCommand:
    tenant_id: TenantId
    event_id: str
    invoice_id: str
    recipient: str
    amount_minor: int
    currency: str


class SendReceipt:
    """Send the receipt for a paid invoice, once.

    - The paid event is taken once (inbox): a redelivered event sends nothing new.
    - A receipt that could not be sent is retried until it is sent or fails for good;
      a receipt that failed for good is sent again when its job is redriven.
    - The message id is the notification's id, so a provider can drop a resend.
    """

    def __init__(self, uow: NotificationsUnitOfWork, sender: EmailSender, clock: Clock) -> None:
        self._uow = uow
        self._sender = sender
        self._clock = clock

    async def __call__(self, cmd: SendReceiptCommand) -> Notification:
        notification = await self._accept(cmd)
        if notification.is_sent:
            return notification
        notification.reopen()
        try:
            await self._sender.send(_receipt(notification, cmd))
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

    async def _accept(self, cmd: SendReceiptCommand) -> Notification:
        async with self._uow:
            if await self._uow.inbox.accept(RECEIPT_CONSUMER, cmd.event_id):
                notification = Notification(
                    id=NotificationId(new_id()),
                    tenant_id=cmd.tenant_id,
                    recipient=cmd.recipient,
                    template=RECEIPT,
                    subject_id=cmd.invoice_id,
                    source_event_id=cmd.event_id,
                    created_at=self._clock.now(),
                )
                await self._uow.notifications.add(notification)
                await self._uow.commit()
                return notification
            existing = await self._uow.notifications.by_source(cmd.tenant_id, RECEIPT, cmd.event_id)
            # A duplicate renews the inbox row's time (see SqlaInbox): keep that renewal.
            await self._uow.commit()
        if existing is None:
            raise PermanentError(f"event {cmd.event_id} was taken but has no notification")
        return existing


def _receipt(notification: Notification, cmd: SendReceiptCommand) -> EmailMessage:
    amount = f"{cmd.amount_minor // 100}.{cmd.amount_minor % 100:02d} {cmd.currency}"
    return EmailMessage(
        message_id=str(notification.id),
        recipient=notification.recipient,
        subject=f"Receipt for invoice {cmd.invoice_id}",
        body=(f"Thank you for your payment of {amount}.\n\nInvoice: {cmd.invoice_id}\n"),
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
