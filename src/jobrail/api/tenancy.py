"""Which tenant a request acts for.

``TenantResolver`` is the port; ``HeaderTenantResolver`` is the development
adapter that reads ``X-Tenant-Id`` (default ``default``). Authentication with API
keys replaces the adapter, nothing else.
"""

import re
from typing import Annotated, Protocol

from fastapi import Depends, Header, HTTPException, Request

from jobrail.kernel.ids import TenantId

TENANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_TENANT = TenantId("default")


class TenantResolver(Protocol):
    async def resolve(self, request: Request) -> TenantId: ...


class HeaderTenantResolver:
    async def resolve(self, request: Request) -> TenantId:
        value = request.headers.get("x-tenant-id")
        if value is None or value == "":
            return DEFAULT_TENANT
        if not TENANT_ID.match(value):
            raise HTTPException(400, "X-Tenant-Id must be 1-64 letters, digits, '.', '_' or '-'")
        return TenantId(value)


async def _current_tenant(
    request: Request,
    x_tenant_id: Annotated[
        str | None,
        Header(description="Tenant the request acts for (development: defaults to 'default')."),
    ] = None,
) -> TenantId:
    resolver: TenantResolver = request.app.state.tenant_resolver
    return await resolver.resolve(request)


CurrentTenant = Annotated[TenantId, Depends(_current_tenant)]
