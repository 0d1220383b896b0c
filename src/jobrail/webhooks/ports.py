import uuid
from collections.abc import Sequence
from typing import Protocol

from jobrail.kernel.errors import TransientError
from jobrail.kernel.ids import TenantId
from jobrail.webhooks.domain import Webhook


class WebhookStore(Protocol):
    async def add(self, webhook: Webhook) -> None: ...

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
