"""Tenants, principals and API keys. Plain Python."""

import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId

TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
KEY_PREFIX = "jr_"
# What a key is known by in listings and logs: never enough to use it.
KEY_HINT_LENGTH = len(KEY_PREFIX) + 6
MIN_KEY_LENGTH = 8
MAX_KEY_LENGTH = 256


def tenant_id_for(name: str) -> TenantId:
    """A tenant's id is its name: lower-case letters, digits, '.', '_' or '-'."""
    if not TENANT_NAME.match(name):
        raise InvalidInputError(
            f"tenant name {name!r} is invalid: use 1-64 lower-case letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return TenantId(name)


def new_api_key() -> str:
    """A fresh key: 256 random bits, URL-safe, recognisable by its ``jr_`` prefix."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    """What is stored and looked up. Keys are random and long, so a plain SHA-256
    is enough (a slow password hash would only slow every request down)."""
    return hashlib.sha256(key.encode()).hexdigest()


def hint(key: str) -> str:
    """The start of a key, to tell keys apart: never more than a quarter of it, so a
    short chosen key (the demo's 8 characters) is not shown whole, and what is left to
    guess of any key is at least three quarters of it."""
    return key[: min(KEY_HINT_LENGTH, len(key) // 4)] + "…"


def check_key_shape(key: str) -> None:
    if not MIN_KEY_LENGTH <= len(key) <= MAX_KEY_LENGTH or not key.isprintable() or " " in key:
        raise InvalidInputError(
            f"an API key is {MIN_KEY_LENGTH}-{MAX_KEY_LENGTH} printable characters without spaces"
        )


@dataclass(frozen=True, slots=True)
class Tenant:
    id: TenantId
    admin: bool
    created_at: datetime
    max_queued: int | None = None
    """At most this many of its jobs wait to start (pending, retrying): the next enqueue
    is refused until some start. None: no cap."""
    weight: float | None = None
    """Its share of a queue's workers under fair dispatch, relative to the other tenants
    with jobs waiting there (jobrail.dispatch). None: the default, 1."""


MAX_QUEUED_CAP = 10_000_000


def check_max_queued(cap: int | None) -> int | None:
    if cap is not None and not 1 <= cap <= MAX_QUEUED_CAP:
        raise InvalidInputError(f"max_queued must be 1 to {MAX_QUEUED_CAP}, or none (no cap)")
    return cap


MIN_WEIGHT, MAX_WEIGHT = 0.01, 1000.0


def check_weight(weight: float | None) -> float | None:
    if weight is not None and not MIN_WEIGHT <= weight <= MAX_WEIGHT:  # NaN is neither
        raise InvalidInputError(
            f"weight must be {MIN_WEIGHT} to {MAX_WEIGHT:g}, or none (the default, 1)"
        )
    return weight


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    id: uuid.UUID
    tenant_id: TenantId
    hint: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: a tenant, and whether its key may use admin endpoints.

    Admin endpoints act for the whole platform (an operator's key); every other
    endpoint acts for ``tenant_id`` only, whatever the key.
    """

    tenant_id: TenantId
    admin: bool
    key_id: uuid.UUID
