"""Who a request acts for: ``Authorization: Bearer <API key>``.

Routes take ``CurrentTenant`` (every query is scoped by it: another tenant's
resource is a 404) or ``AdminPrincipal`` (operator endpoints; a tenant key gets
403). No key, or an unknown or revoked one, is a 401.
"""

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId
from jobrail.tenants.domain import Principal, check_key_shape
from jobrail.tenants.use_cases import Authenticate

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key made by `jobrail tenants create NAME`.",
)

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None:
        raise HTTPException(401, "send an API key: Authorization: Bearer <key>", headers=_CHALLENGE)
    key = credentials.credentials
    try:
        check_key_shape(key)
    except InvalidInputError:
        raise HTTPException(401, "the API key is not valid", headers=_CHALLENGE) from None
    authenticate: Authenticate = request.app.state.authenticate
    principal = await authenticate(key)
    if principal is None:
        raise HTTPException(401, "the API key is not valid", headers=_CHALLENGE)
    request.state.principal = principal
    return principal


CurrentPrincipal = Annotated[Principal, Depends(_principal)]


async def _tenant(principal: CurrentPrincipal) -> TenantId:
    return principal.tenant_id


async def require_admin(principal: CurrentPrincipal) -> Principal:
    if not principal.admin:
        raise HTTPException(403, "this endpoint needs an admin API key")
    return principal


CurrentTenant = Annotated[TenantId, Depends(_tenant)]
AdminPrincipal = Annotated[Principal, Depends(require_admin)]
