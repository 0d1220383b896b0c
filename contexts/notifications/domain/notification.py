"""The notification aggregate: pending until sent; failed when it never can be."""

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NewType

from jobrail.kernel.errors import ConflictError
from jobrail.kernel.ids import TenantId

NotificationId = NewType("NotificationId", uuid.UUID)

MAX_ERROR = 1000


class NotificationStatus(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class NotificationRuleError(ConflictError):
    pass


@dataclass(eq=False)
class Notification:
    id: NotificationId
    tenant_id: TenantId
    recipient: str
    template: str
    subject_id: str
    source_event_id: str
    created_at: datetime
    status: NotificationStatus = NotificationStatus.PENDING
    attempts: int = 0
    last_error: str | None = None
    sent_at: datetime | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Notification) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def is_sent(self) -> bool:
        return self.status is NotificationStatus.SENT

    def sending_failed(self, error: str, *, permanent: bool) -> None:
        self._require_pending("record a failure for")
        self.attempts += 1
        self.last_error = error[:MAX_ERROR]
        if permanent:
            self.status = NotificationStatus.FAILED

    def reopen(self) -> None:
        """Try a failed notification again (its job was redriven)."""
        if self.status is NotificationStatus.FAILED:
            self.status = NotificationStatus.PENDING

    def sent(self, now: datetime) -> None:
        self._require_pending("mark as sent")
        self.attempts += 1
        self.status = NotificationStatus.SENT
        self.sent_at = now
        self.last_error = None

    def _require_pending(self, action: str) -> None:
        if self.status is not NotificationStatus.PENDING:
            raise NotificationRuleError(f"cannot {action} a {self.status} notification")
