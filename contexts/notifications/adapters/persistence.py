from typing import Any

from sqlalchemy import (
    Column,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from contexts.notifications.domain.notification import (
    Notification,
    NotificationId,
    NotificationStatus,
)
from contexts.schema import metadata
from jobrail.kernel.ids import TenantId
from jobrail.sql import SqlaUnitOfWork, UtcDateTime, database_errors

notifications = Table(
    "notifications",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("recipient", String(320), nullable=False),
    Column("template", String(64), nullable=False),
    Column("subject_id", String(255), nullable=False),
    Column("source_event_id", String(255), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("sent_at", UtcDateTime),
    UniqueConstraint("tenant_id", "template", "source_event_id", name="uq_notifications_source"),
    Index("ix_notifications_tenant_subject", "tenant_id", "subject_id", "id"),
)


def _state(notification: Notification) -> dict[str, Any]:
    return {
        "status": notification.status.value,
        "attempts": notification.attempts,
        "last_error": notification.last_error,
        "sent_at": notification.sent_at,
    }


def _notification(row: Any) -> Notification:
    return Notification(
        id=NotificationId(row.id),
        tenant_id=TenantId(row.tenant_id),
        recipient=row.recipient,
        template=row.template,
        subject_id=row.subject_id,
        source_event_id=row.source_event_id,
        created_at=row.created_at,
        status=NotificationStatus(row.status),
        attempts=row.attempts,
        last_error=row.last_error,
        sent_at=row.sent_at,
    )


class SqlaNotificationRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def add(self, notification: Notification) -> None:
        with database_errors():
            await self._session.execute(
                insert(notifications).values(
                    id=notification.id,
                    tenant_id=notification.tenant_id,
                    recipient=notification.recipient,
                    template=notification.template,
                    subject_id=notification.subject_id,
                    source_event_id=notification.source_event_id,
                    created_at=notification.created_at,
                    **_state(notification),
                )
            )

    async def by_source(
        self, tenant_id: TenantId, template: str, source_event_id: str
    ) -> Notification | None:
        with database_errors():
            row = (
                await self._session.execute(
                    select(notifications).where(
                        notifications.c.tenant_id == tenant_id,
                        notifications.c.template == template,
                        notifications.c.source_event_id == source_event_id,
                    )
                )
            ).first()
        return _notification(row) if row else None

    async def list(
        self, tenant_id: TenantId, *, subject_id: str | None, limit: int
    ) -> list[Notification]:
        query = select(notifications).where(notifications.c.tenant_id == tenant_id)
        if subject_id is not None:
            query = query.where(notifications.c.subject_id == subject_id)
        query = query.order_by(notifications.c.id.desc()).limit(limit)
        with database_errors():
            rows = (await self._session.execute(query)).all()
        return [_notification(row) for row in rows]

    async def save(self, notification: Notification) -> None:
        with database_errors():
            await self._session.execute(
                update(notifications)
                .where(notifications.c.id == notification.id)
                .values(_state(notification))
            )


class SqlaNotificationsUnitOfWork(SqlaUnitOfWork):
    notifications: SqlaNotificationRepository

    async def __aenter__(self) -> "SqlaNotificationsUnitOfWork":
        await super().__aenter__()
        self.notifications = SqlaNotificationRepository(self.session)
        return self
