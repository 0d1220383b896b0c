"""What the tenant use cases need from a store."""

import uuid
from datetime import datetime
from typing import Protocol

from jobrail.kernel.ids import TenantId
from jobrail.tenants.domain import ApiKeyInfo, Principal, Tenant


class TenantExistsError(Exception):
    pass


class KeyExistsError(Exception):
    """A key with the same digest is already stored (live or revoked)."""


class TenantDirectory(Protocol):
    async def create_tenant(self, tenant: Tenant) -> None:
        """Raises TenantExistsError when the id is taken."""

    async def get_tenant(self, tenant_id: TenantId) -> Tenant | None: ...

    async def list_tenants(self) -> list[Tenant]: ...

    async def set_max_queued(self, tenant_id: TenantId, cap: int | None) -> Tenant | None:
        """Set the tenant's cap on its jobs waiting to start: the tenant, or None if
        there is no such tenant."""

    async def set_weight(self, tenant_id: TenantId, weight: float | None) -> Tenant | None:
        """Set the tenant's weight under fair dispatch (None: the default): the tenant,
        or None if there is no such tenant."""

    async def add_key(self, key: ApiKeyInfo, key_digest: str) -> None:
        """Raises KeyExistsError when the digest is taken."""

    async def revoke_key(self, key_id: uuid.UUID, at: datetime) -> ApiKeyInfo | None:
        """Revoke a live key; None when there is no such live key."""

    async def list_keys(self, tenant_id: TenantId) -> list[ApiKeyInfo]: ...

    async def principal_for(self, key_digest: str) -> Principal | None:
        """The tenant of a live key with this digest, or None."""
