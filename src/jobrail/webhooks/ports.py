import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobrail.jobs.domain import Job, JobStatus
from jobrail.kernel.errors import TransientError
from jobrail.kernel.ids import TenantId
from jobrail.webhooks.domain import Webhook


class WebhookStore(Protocol):
    async def add(self, webhook: Webhook, *, at_most: int) -> bool:
        """Add `webhook` unless its tenant has `at_most` already (False then): the count
        and the insert are one step, so that concurrent requests cannot pass the cap."""
        ...

    async def of_tenant(self, tenant: TenantId) -> Sequence[Webhook]:
        """The tenant's webhooks, oldest first (not the deleted ones)."""
        ...

    async def get(self, tenant: TenantId, webhook_id: uuid.UUID) -> Webhook | None: ...

    async def delete(self, tenant: TenantId, webhook_id: uuid.UUID) -> bool:
        """False if the tenant has no such webhook."""
        ...


class DeliveryFailedError(TransientError):
    """The receiver could not be reached or did not answer 2xx: the delivery is tried
    again later."""


class WebhookSender(Protocol):
    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        """POST `body`; the receiver's status. DeliveryFailedError if it cannot be
        reached; PermanentError if its name resolves to an address a webhook may not
        reach."""
        ...


class HostResolver(Protocol):
    async def addresses(self, host: str, port: int) -> Sequence[str]:
        """The addresses `host` resolves to now, as a delivery would look it up; none if
        it does not resolve in a short time (each delivery looks it up again)."""
        ...


class WebhookOpsReads(Protocol):
    """Every tenant's webhooks and deliveries, for operators. Nothing here reads a
    webhook's secret."""

    async def webhook_counts(self) -> dict[TenantId, int]:
        """The tenants that have webhooks, with how many (not the deleted ones)."""
        ...

    async def delivery_counts(self, since: datetime) -> list[tuple[TenantId, JobStatus, int]]:
        """Delivery jobs enqueued since `since`, by tenant and status."""
        ...

    async def failed_deliveries(self, since: datetime, limit: int) -> list[tuple[Job, str | None]]:
        """Failed delivery jobs enqueued since `since`, the newest first, each with its
        webhook's URL (None if that row is gone; a deleted webhook's is kept)."""
        ...
