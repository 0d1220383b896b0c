"""Creating tenants, issuing and revoking keys, and authenticating a request's key."""

import asyncio
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import ConflictError, NotFoundError
from jobrail.kernel.ids import TenantId
from jobrail.kernel.ids import new_id as new_uuid
from jobrail.tenants.domain import (
    ApiKeyInfo,
    Principal,
    Tenant,
    check_key_shape,
    check_max_queued,
    check_weight,
    digest,
    hint,
    new_api_key,
    tenant_id_for,
)
from jobrail.tenants.ports import KeyExistsError, TenantDirectory, TenantExistsError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key as it is shown once. ``api_key`` is never stored."""

    tenant_id: TenantId
    key_id: uuid.UUID
    api_key: str
    admin: bool


class CreateTenant:
    """A new tenant and its first API key."""

    def __init__(self, directory: TenantDirectory, clock: Clock) -> None:
        self._directory = directory
        self._clock = clock

    async def __call__(self, name: str, *, admin: bool = False) -> IssuedKey:
        tenant = Tenant(id=tenant_id_for(name), admin=admin, created_at=self._clock.now())
        try:
            await self._directory.create_tenant(tenant)
        except TenantExistsError:
            raise ConflictError(f"tenant {tenant.id!r} already exists") from None
        return await IssueApiKey(self._directory, self._clock)(tenant.id)


class SetQueuedCap:
    """Cap a tenant's jobs waiting to start (None: no cap). Its enqueues beyond the cap
    are refused (HTTP 429) until some of its jobs start; the jobs already queued stay."""

    def __init__(self, directory: TenantDirectory) -> None:
        self._directory = directory

    async def __call__(self, tenant_id: TenantId, cap: int | None) -> Tenant:
        tenant = await self._directory.set_max_queued(tenant_id, check_max_queued(cap))
        if tenant is None:
            raise NotFoundError(f"tenant {tenant_id!r} not found")
        return tenant


class SetTenantWeight:
    """Set a tenant's weight under fair dispatch (None: the default, 1): among the
    tenants with jobs waiting in a queue, each gets a share of its workers in proportion
    to its weight. The dispatchers read it again within a second; nothing restarts."""

    def __init__(self, directory: TenantDirectory) -> None:
        self._directory = directory

    async def __call__(self, tenant_id: TenantId, weight: float | None) -> Tenant:
        tenant = await self._directory.set_weight(tenant_id, check_weight(weight))
        if tenant is None:
            raise NotFoundError(f"tenant {tenant_id!r} not found")
        return tenant


class IssueApiKey:
    """Another key for a tenant (to rotate: issue, deploy, then revoke the old one).

    ``key`` lets the caller choose the key (the embedded mode's demo key); otherwise
    a random one is made.
    """

    def __init__(self, directory: TenantDirectory, clock: Clock) -> None:
        self._directory = directory
        self._clock = clock

    async def __call__(self, tenant_id: TenantId, key: str | None = None) -> IssuedKey:
        tenant = await self._directory.get_tenant(tenant_id)
        if tenant is None:
            raise NotFoundError(f"tenant {tenant_id!r} not found")
        if key is None:
            key = new_api_key()
        check_key_shape(key)
        info = ApiKeyInfo(
            id=new_uuid(),
            tenant_id=tenant.id,
            hint=hint(key),
            created_at=self._clock.now(),
            revoked_at=None,
        )
        try:
            await self._directory.add_key(info, digest(key))
        except KeyExistsError:
            raise ConflictError("this API key is already in use") from None
        return IssuedKey(tenant_id=tenant.id, key_id=info.id, api_key=key, admin=tenant.admin)


class RevokeApiKey:
    def __init__(self, directory: TenantDirectory, clock: Clock) -> None:
        self._directory = directory
        self._clock = clock

    async def __call__(self, key_id: uuid.UUID) -> ApiKeyInfo:
        revoked = await self._directory.revoke_key(key_id, self._clock.now())
        if revoked is None:
            raise NotFoundError(f"no live API key with id {key_id}")
        return revoked


class Authenticate:
    """The principal of a presented key, or None for an unknown or revoked key.

    Answers are cached in the process for ``ttl_s``: a revoked key stops working within
    that time. Live keys and unknown ones are kept apart, each bounded: a flood of
    random keys fills only the cache of unknown keys and never evicts a live key (which
    would turn every request of a real client back into a lookup). Callers throttle
    lookups of keys not known to be live (``jobrail.http.auth``); ``live`` is the check
    that needs no lookup.

    Separately, the digests of keys found live are remembered for ``seen_live_s``
    (much longer than ``ttl_s``, bounded like the caches): ``seen_live`` tells the
    throttle that a key is a real client's, so that a neighbour's flood of wrong keys
    from the same address does not lock it out once its cache entry has expired. It is
    no answer in itself: such a key is still looked up (a revocation is seen), and is
    forgotten as soon as a lookup finds it is not live.
    """

    def __init__(
        self,
        directory: TenantDirectory,
        ttl_s: float,
        max_entries: int = 10_000,
        max_unknown: int = 10_000,
        seen_live_s: float = 24 * 3600,
    ) -> None:
        self._directory = directory
        self._ttl_s = ttl_s
        self._seen_live_s = seen_live_s
        self._live = _TtlCache[Principal](max_entries)
        self._unknown = _TtlCache[None](max_unknown)
        self._seen = _TtlCache[None](max_entries)
        self._lookups: dict[str, asyncio.Future[Principal | None]] = {}
        self._generation = 0

    async def __call__(self, key: str) -> Principal | None:
        return await self.by_digest(digest(key))

    def live(self, key: str) -> Principal | None:
        """The principal of a key this process recently found live, without a lookup."""
        return self._live.get(digest(key), time.monotonic())

    def seen_live(self, key: str) -> bool:
        """Whether a lookup found this key live within ``seen_live_s``."""
        return self._seen.has(digest(key), time.monotonic())

    async def by_digest(self, key_digest: str) -> Principal | None:
        """The same, for a caller that holds the digest rather than the key (the ops
        page's cookie)."""
        now = time.monotonic()
        principal = self._live.get(key_digest, now)
        if principal is not None or self._unknown.has(key_digest, now):
            return principal
        # Requests that miss together share one lookup: when a busy key's entry expires,
        # every request in flight with it would otherwise ask the database at once.
        lookup = self._lookups.get(key_digest)
        if lookup is None:
            lookup = asyncio.ensure_future(self._look_up(key_digest, self._generation))
            self._lookups[key_digest] = lookup
            lookup.add_done_callback(lambda done: self._looked_up(key_digest, done))
        # Shielded: one caller's cancellation (its client went away) is not the others'.
        return await asyncio.shield(lookup)

    def _looked_up(self, key_digest: str, done: "asyncio.Future[Principal | None]") -> None:
        if self._lookups.get(key_digest) is done:
            del self._lookups[key_digest]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have gone away

    async def _look_up(self, key_digest: str, generation: int) -> Principal | None:
        principal = await self._directory.principal_for(key_digest)
        if generation != self._generation:
            return principal  # forgotten meanwhile (`forget`): answer, but keep nothing
        now = time.monotonic()
        if principal is None:
            self._unknown.put(key_digest, None, now + self._ttl_s)
            self._seen.discard(key_digest)
        else:
            self._live.put(key_digest, principal, now + self._ttl_s)
            self._seen.put(key_digest, None, now + self._seen_live_s)
        return principal

    def forget(self) -> None:
        """Forget every answer, and those of lookups still under way (a revocation)."""
        self._generation += 1
        self._lookups.clear()
        self._live.clear()
        self._unknown.clear()
        self._seen.clear()


class _TtlCache(Generic[T]):
    """A bounded map whose entries expire; the oldest entry goes first when it is full.

    Written here rather than taken from cachetools: twenty lines, and the project has
    no other use for that dependency."""

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, T]] = OrderedDict()

    def has(self, key: str, now: float) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry[0] > now

    def get(self, key: str, now: float) -> T | None:
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] > now else None

    def put(self, key: str, value: T, until: float) -> None:
        self._entries[key] = (until, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def discard(self, key: str) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
