"""Events: what happened, as plain data.

A *domain event* stays inside its context (an aggregate records it; the use case
reads it). An *integration event* crosses contexts: it has a versioned name
(``invoice.paid.v1``), is listed in the event catalog, and reaches its consumers
through the outbox, as a job of each consumer's type.
"""

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from jobrail.kernel.ids import TenantId, new_id


@dataclass(frozen=True, kw_only=True)
class DomainEvent:
    occurred_at: datetime


@dataclass(frozen=True, kw_only=True)
class IntegrationEvent:
    """Subclasses set ``name`` (``<aggregate>.<past tense>.v<N>``) and add their fields
    (plain JSON-friendly values: str, int, bool, datetime)."""

    name: ClassVar[str]
    tenant_id: TenantId
    occurred_at: datetime
    event_id: uuid.UUID = field(default_factory=new_id)


class AggregateRoot:
    """Collects domain events for the use case to pull after it changed the aggregate."""

    def __init__(self) -> None:
        self._events: list[DomainEvent] = []

    def record(self, event: DomainEvent) -> None:
        self._events.append(event)

    def pull_events(self) -> list[DomainEvent]:
        events, self._events = self._events, []
        return events
