"""The event catalog lists every integration event, and only listed events travel."""

import dataclasses
import inspect
import re
from datetime import UTC, datetime
from typing import ClassVar

import pytest

import contexts.shared.events as shared_events
from contexts.catalog import EVENTS
from contexts.shared.events import InvoicePaidV1
from jobrail.events.catalog import EventCatalog, UnknownEventError
from jobrail.jobs.registry import JobRegistry
from jobrail.kernel.events import IntegrationEvent
from jobrail.kernel.ids import TenantId
from jobrail.outbox.transactional import OutboxEventPublisher
from jobrail.runtime.bootstrap import build_runtime
from jobrail.settings import Settings
from tests.contexts.fakes import FakeJobQueue
from tests.support.apps import REFERENCE

NAME = r"^[a-z_]+\.[a-z_]+\.v\d+$"


def test_every_integration_event_is_in_the_catalog_with_a_versioned_name() -> None:
    defined = {
        cls
        for _, cls in inspect.getmembers(shared_events, inspect.isclass)
        if issubclass(cls, IntegrationEvent) and cls is not IntegrationEvent
    }
    listed = {spec.type for spec in EVENTS}

    assert defined == listed
    for spec in EVENTS:
        assert re.match(NAME, spec.name), spec.name
        assert spec.producer
        assert spec.consumers


def test_every_consumer_is_a_job_type_of_the_platform() -> None:
    runtime = build_runtime(Settings(), worker=False, modules=REFERENCE)
    registry: JobRegistry = runtime.registry

    for spec in EVENTS:
        for consumer in spec.consumers:
            assert registry.get(consumer) is not None, consumer


def test_the_catalog_gives_each_event_a_json_schema() -> None:
    schema = EventCatalog(EVENTS).schema("invoice.paid.v1")

    assert set(schema["required"]) >= {"invoice_id", "amount_minor", "currency", "tenant_id"}


async def test_publishing_an_event_the_catalog_does_not_list_fails() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Unlisted(IntegrationEvent):
        name: ClassVar[str] = "invoice.refunded.v1"

    publisher = OutboxEventPublisher(FakeJobQueue(), EventCatalog(EVENTS))  # type: ignore[arg-type]

    with pytest.raises(UnknownEventError, match="not in the event catalog"):
        await publisher.publish(Unlisted(tenant_id=TenantId("t"), occurred_at=datetime.now(UTC)))


async def test_a_listed_event_becomes_one_job_per_consumer_keyed_by_its_id() -> None:
    queue = FakeJobQueue()
    publisher = OutboxEventPublisher(queue, EventCatalog(EVENTS))  # type: ignore[arg-type]
    event = InvoicePaidV1(
        tenant_id=TenantId("acme"),
        occurred_at=datetime.now(UTC),
        invoice_id="i1",
        customer_id="c1",
        customer_email="c@example.com",
        amount_minor=100,
        currency="EUR",
    )

    await publisher.publish(event)
    await publisher.publish(event)

    [job] = queue.jobs
    assert job.type == "notifications.send_receipt"
    assert job.idempotency_key == f"event:invoice.paid.v1:{event.event_id}:{job.type}"
    assert job.payload["data"]["invoice_id"] == "i1"
