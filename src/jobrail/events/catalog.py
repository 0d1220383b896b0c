"""The event catalog and how integration events travel.

The catalog lists every integration event: its versioned name, its producer, its
consumers (job types) and its payload schema. Publishing an event records, in the
producer's transaction, one job per consumer (idempotent on the event id), so an
event reaches each consumer with the durability, retries, limits and dead letters
of any job. A consumer's job payload is an ``EventDelivery``; consumers still
deduplicate through the inbox, because an event may be delivered more than once.
"""

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter

from jobrail.kernel.events import IntegrationEvent

E = TypeVar("E", bound=IntegrationEvent)


class UnknownEventError(LookupError):
    """An event was published that the catalog does not list."""


@dataclass(frozen=True, slots=True)
class EventSpec:
    type: type[IntegrationEvent]
    producer: str
    consumers: Sequence[str]
    description: str = ""

    @property
    def name(self) -> str:
        return self.type.name


class EventDelivery(BaseModel):
    """The payload of a consumer's job: one integration event."""

    event_id: str
    name: str
    occurred_at: datetime
    data: dict[str, Any]


class EventCatalog:
    def __init__(self, specs: Iterable[EventSpec]) -> None:
        self._specs: dict[str, EventSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"event {spec.name!r} is listed twice")
            self._specs[spec.name] = spec
        self._adapters = {name: TypeAdapter(spec.type) for name, spec in self._specs.items()}

    def __iter__(self) -> Any:
        return iter(self._specs.values())

    def spec(self, name: str) -> EventSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownEventError(f"event {name!r} is not in the event catalog") from None

    def delivery(self, event: IntegrationEvent) -> EventDelivery:
        spec = self.spec(event.name)
        if type(event) is not spec.type:
            raise UnknownEventError(
                f"{type(event).__name__} is not the type listed for {event.name}"
            )
        data = self._adapters[event.name].dump_python(event, mode="json")
        return EventDelivery(
            event_id=str(event.event_id),
            name=event.name,
            occurred_at=event.occurred_at,
            data=data,
        )

    def load(self, delivery: EventDelivery, expected: type[E]) -> E:
        """The event a consumer received, as the producer's type."""
        spec = self.spec(delivery.name)
        if spec.type is not expected:
            raise UnknownEventError(f"expected {expected.__name__}, got event {delivery.name}")
        event = self._adapters[delivery.name].validate_python(delivery.data)
        assert isinstance(event, expected)
        return event

    def schema(self, name: str) -> dict[str, Any]:
        return self._adapters[name].json_schema()

    def fields(self, name: str) -> list[str]:
        return [f.name for f in dataclasses.fields(self.spec(name).type)]
