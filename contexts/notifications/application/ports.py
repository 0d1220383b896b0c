from dataclasses import dataclass
from typing import Protocol, Self

from contexts.notifications.domain.notification import Notification
from jobrail.kernel.ids import TenantId
from jobrail.ports import Inbox


@dataclass(frozen=True, slots=True)
class EmailMessage:
    message_id: str
    recipient: str
    subject: str
    body: str


class EmailSender(Protocol):
    async def send(self, message: EmailMessage) -> None:
        """Hand the message to the provider. Raise TransientError when trying again may
        work (connection refused, 4xx replies), PermanentError when it cannot (5xx)."""
        ...


class NotificationRepository(Protocol):
    async def add(self, notification: Notification) -> None: ...

    async def by_source(
        self, tenant_id: TenantId, template: str, source_event_id: str
    ) -> Notification | None: ...

    async def list(
        self, tenant_id: TenantId, *, subject_id: str | None, limit: int
    ) -> list[Notification]: ...

    async def save(self, notification: Notification) -> None: ...


class NotificationsUnitOfWork(Protocol):
    notifications: NotificationRepository
    inbox: Inbox

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def commit(self) -> None: ...
