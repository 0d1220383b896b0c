"""Who a request acts for: ``Authorization: Bearer <API key>``.

Routes take ``CurrentTenant`` (every query is scoped by it: another tenant's
resource is a 404) or ``AdminPrincipal`` (operator endpoints; a tenant key gets
403). No key, or an unknown or revoked one, is a 401.

A key this process has not recently found live is looked up in the database, and
that lookup is throttled per client address (``api_limits.auth_failures``): a key
that turns out unknown or revoked is charged to the client as a failed
authentication, and a client whose budget is spent gets a 429 with Retry-After, and
no lookup. A key this process found live within the last day
(``auth.seen_live_s``) is not refused for its address's spent budget (a neighbour
behind the same NAT retrying a bad key must not lock it out), but it is still looked
up, so a revocation takes effect as before.
The client address is the peer's, or X-Forwarded-For's from ``api.trusted_proxies``;
an IPv6 client is counted by its /64 network.

The key lookup and the throttle are the app's ``Authenticate`` and ``ApiRateLimiter``:
``create_app``'s lifespan puts them on ``app.state``; an app whose lifespan did not put
them there (jobrail's app mounted in a host's, whose lifespan never runs, or a host
that includes jobrail's routers with ``setup_dishka``) has them from its dishka
container, once. ``jobrail.JobRail`` passes its own.
"""

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId
from jobrail.limits.api import ApiRateLimiter
from jobrail.tenants.domain import Principal, check_key_shape
from jobrail.tenants.use_cases import Authenticate

API_KEY_SCHEME = "ApiKey"
API_KEY_DESCRIPTION = "An API key made by `jobrail tenants create NAME`."

_bearer = HTTPBearer(auto_error=False, scheme_name=API_KEY_SCHEME, description=API_KEY_DESCRIPTION)

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ApiServices:
    """What authenticating a request takes: the key lookup and the throttle."""

    authenticate: Authenticate
    limiter: ApiRateLimiter


def state_service(request: Request, name: str) -> Any:
    """``app.state.<name>`` (what create_app's lifespan put there), or None."""
    return getattr(request.app.state, name, None)


async def app_service(request: Request, name: str, kind: type[T]) -> T:
    """``app.state.<name>``, or else the app's dishka container's `kind`, kept there."""
    found: T | None = state_service(request, name)
    if found is not None:
        return found
    container: Any = getattr(request.app.state, "dishka_container", None)
    if container is None:
        raise RuntimeError(
            f"this app has no {kind.__name__}: serve jobrail's routes from create_app(), "
            "from JobRail.router(), or with setup_dishka and jobrail's container"
        )
    found = await container.get(kind)
    setattr(request.app.state, name, found)
    return found


async def _principal(request: Request, credentials: BearerCredentials) -> Principal:
    return await authenticated(request, credentials)


async def authenticated(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None,
    services: ApiServices | None = None,
) -> Principal:
    """The principal of the request's key; a 401 without a live key (a 429 past the
    client's budget of failed authentications). `services` are the app's unless given."""
    if credentials is None:
        raise HTTPException(401, "send an API key: Authorization: Bearer <key>", headers=_CHALLENGE)
    key = credentials.credentials
    try:
        check_key_shape(key)
    except InvalidInputError:
        raise HTTPException(401, "the API key is not valid", headers=_CHALLENGE) from None
    principal = await principal_for_key(request, key, services)
    if principal is None:
        raise HTTPException(401, "the API key is not valid", headers=_CHALLENGE)
    request.state.principal = principal
    return principal


async def principal_for_key(
    request: Request, key: str, services: ApiServices | None = None
) -> Principal | None:
    """The principal of a live key, or None; raises a 429 past the client's budget of
    failed authentications, before the key is looked up."""
    if services is not None:
        authenticate = services.authenticate
    else:
        authenticate = state_service(request, "authenticate")
        if authenticate is None:
            authenticate = await app_service(request, "authenticate", Authenticate)
    principal = authenticate.live(key)
    if principal is not None:
        return principal
    if services is not None:
        limiter = services.limiter
    else:
        limiter = state_service(request, "api_limiter")
        if limiter is None:
            limiter = await app_service(request, "api_limiter", ApiRateLimiter)
    address = client_address(request)
    if not authenticate.seen_live(key):
        budget = await limiter.auth_budget(address)
        if budget is not None and not budget.allowed:
            raise HTTPException(
                429,
                f"too many failed authentications: the limit is {budget.rule}",
                headers=budget.headers(),
            )
    principal = await authenticate(key)
    if principal is None:
        await limiter.charge_auth_failure(address)
    return principal


def client_address(request: Request) -> str:
    """The client the throttle counts: its IPv4 address, or its IPv6 /64 network (one
    host is commonly given a whole /64, so per full IPv6 address it would have as many
    budgets as it likes). ProxyHeadersMiddleware has already put X-Forwarded-For's
    address there when the peer is a trusted proxy."""
    host = request.client.host if request.client else "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # not an address (a test client's name, a Unix socket)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


CurrentPrincipal = Annotated[Principal, Depends(_principal)]


async def current_tenant(principal: CurrentPrincipal) -> TenantId:
    """The tenant of the request's API key (``CurrentTenant``), as a dependency."""
    return principal.tenant_id


async def require_admin(principal: CurrentPrincipal) -> Principal:
    if not principal.admin:
        raise HTTPException(403, "this endpoint needs an admin API key")
    return principal


CurrentTenant = Annotated[TenantId, Depends(current_tenant)]
AdminPrincipal = Annotated[Principal, Depends(require_admin)]
