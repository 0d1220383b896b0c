"""The API: its server and what it refuses (bodies, headers, slow clients), who may call
it from a browser or through a proxy, how long it trusts a key, and its rate limits by
route group (see jobrail.http)."""

from typing import Annotated, Literal, Self

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from jobrail.settings.values import MAX_COUNT, MAX_SECONDS, PositiveFloat, PositiveInt, comma_list


class ApiLimitRule(BaseModel):
    scope: Literal["ip", "tenant", "global"]
    limit: PositiveInt
    window_s: PositiveFloat
    algorithm: Literal["sliding_window", "token_bucket"] = "sliding_window"


class ApiLimitsSettings(BaseModel):
    """API rate limits by route group. Enqueue routes fail closed without Redis.

    Authenticated routes are limited per tenant and globally, never per client
    address: every tenant behind one NAT or proxy shares an address, so a per-IP
    budget let sixteen tenants use up a seventeenth's. Per-address limits apply to
    what has no tenant: failed authentications (``auth_failures``), counted per client
    address (``api.trusted_proxies`` says when to believe X-Forwarded-For).
    """

    enabled: bool = True
    enqueue: list[ApiLimitRule] = [
        ApiLimitRule(scope="tenant", limit=30, window_s=60),
        ApiLimitRule(scope="global", limit=6000, window_s=60, algorithm="token_bucket"),
    ]
    read: list[ApiLimitRule] = [
        ApiLimitRule(scope="tenant", limit=1200, window_s=60, algorithm="token_bucket"),
    ]
    auth_failures: list[ApiLimitRule] = Field(
        default=[ApiLimitRule(scope="ip", limit=20, window_s=60, algorithm="token_bucket")],
        description="Failed authentications allowed per client address (token buckets): "
        "past them a client gets 429 before its key is looked up.",
    )
    read_fail_open: bool = Field(
        default=True, description="Serve read routes unlimited while Redis is unreachable."
    )

    @model_validator(mode="after")
    def _scopes_fit_their_traffic(self) -> Self:
        for group in ("enqueue", "read"):
            if any(rule.scope == "ip" for rule in getattr(self, group)):
                raise ValueError(
                    f"{group}: per-IP rules are for unauthenticated traffic only "
                    "(auth_failures); tenants behind one address would share one budget"
                )
        for rule in self.auth_failures:
            if rule.scope == "tenant":
                raise ValueError("auth_failures: a failed authentication has no tenant")
            if rule.algorithm != "token_bucket":
                raise ValueError("auth_failures: use token_bucket rules")
        return self


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    ready_timeout_s: PositiveFloat = 2.0
    docs: bool | None = Field(
        default=None,
        description="Serve /docs and /openapi.json; unset means only in development.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed to call the API from a browser; empty allows none.",
    )
    max_body_bytes: PositiveInt = Field(
        default=64 * 1024, description="Larger request bodies are refused with 413."
    )
    max_header_bytes: Annotated[int, Field(ge=1024, le=MAX_COUNT)] = Field(
        default=16 * 1024,
        description="A request line and headers larger than this are refused with 431 "
        "and the connection closed (jobrail api).",
    )
    header_timeout_s: PositiveFloat = Field(
        default=10.0,
        description="A connection that has not sent a whole request line and headers "
        "this long after it opened (or after its previous response) is closed "
        "(jobrail api).",
    )
    body_timeout_s: PositiveFloat = Field(
        default=30.0,
        description="A request whose whole body has not arrived this long after its "
        "headers gets 408 and the connection is closed (jobrail api).",
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of the proxies in front of the API: "
        "from them, X-Forwarded-For names the client. Empty: the peer is the client, and "
        "X-Forwarded-For is ignored.",
    )

    _split_origins = field_validator("cors_origins", "trusted_proxies", mode="before")(comma_list)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, proxies: list[str]) -> list[str]:
        import ipaddress

        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"{proxy!r} is not an IP address or network") from None
        return proxies


class AuthSettings(BaseModel):
    key_cache_ttl_s: Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)] = Field(
        default=10.0,
        description="How long a process trusts what it learnt about a key: a revoked key "
        "stops working within this time.",
    )
    seen_live_s: PositiveFloat = Field(
        default=24 * 3600.0,
        description="How long a process remembers that a key was live: such a key is "
        "still looked up, but not refused for its address's spent budget of failed "
        "authentications.",
    )
