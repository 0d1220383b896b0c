"""API keys: random, stored as digests, and cached for a short while per process."""

import asyncio
from typing import Any

from jobrail.kernel.ids import TenantId
from jobrail.tenants.domain import digest, new_api_key
from jobrail.tenants.use_cases import Authenticate, CreateTenant, RevokeApiKey
from tests.fakes import FakeTenantDirectory, FixedClock


def test_keys_are_random_and_their_digest_is_all_that_is_kept() -> None:
    keys = {new_api_key() for _ in range(1000)}

    assert len(keys) == 1000
    key = keys.pop()
    assert key.startswith("jr_")
    assert len(key) == 46
    assert digest(key) == digest(key)
    assert len(digest(key)) == 64
    assert key not in digest(key)


async def test_stored_keys_are_digests_and_hints_never_the_key() -> None:
    directory = FakeTenantDirectory()

    issued = await CreateTenant(directory, FixedClock())("acme")

    [(stored_digest, info)] = directory.keys.items()
    assert stored_digest == digest(issued.api_key)
    assert issued.api_key not in info.hint
    assert len(info.hint) < len(issued.api_key) // 3


async def test_authenticate_caches_answers_for_the_ttl_and_then_asks_again() -> None:
    directory = FakeTenantDirectory()
    issued = await CreateTenant(directory, FixedClock())("acme")
    authenticate = Authenticate(directory, ttl_s=0.2)

    first = await authenticate(issued.api_key)
    await authenticate(issued.api_key)
    assert await authenticate("jr_unknown-key") is None
    assert await authenticate("jr_unknown-key") is None
    assert first is not None
    assert first.tenant_id == TenantId("acme")
    assert directory.lookups == 2  # one per distinct key

    await RevokeApiKey(directory, FixedClock())(issued.key_id)
    assert await authenticate(issued.api_key) is not None  # still trusted...
    await asyncio.sleep(0.25)
    assert await authenticate(issued.api_key) is None  # ...until the TTL runs out


async def test_the_cache_stays_bounded() -> None:
    directory = FakeTenantDirectory()
    authenticate = Authenticate(directory, ttl_s=60, max_entries=10, max_unknown=10)

    for n in range(50):
        await authenticate(f"jr_flood-{n}")
    await authenticate("jr_flood-0")

    assert directory.lookups == 51  # the oldest entries were dropped, so it asked again


async def test_a_flood_of_unknown_keys_never_evicts_a_live_one() -> None:
    directory = FakeTenantDirectory()
    issued = await CreateTenant(directory, FixedClock())("acme")
    authenticate = Authenticate(directory, ttl_s=60, max_entries=10, max_unknown=10)
    assert await authenticate(issued.api_key) is not None
    lookups = directory.lookups

    for n in range(1000):
        assert await authenticate(f"jr_flood-{n}") is None

    assert directory.lookups == lookups + 1000
    assert authenticate.live(issued.api_key) is not None
    assert await authenticate(issued.api_key) is not None
    assert directory.lookups == lookups + 1000  # still cached: no lookup


class SlowDirectory(FakeTenantDirectory):
    """A lookup that takes a while, as a database's does."""

    async def principal_for(self, key_digest: str) -> Any:
        await asyncio.sleep(0.01)
        return await super().principal_for(key_digest)


async def test_requests_that_miss_the_cache_together_share_one_lookup() -> None:
    directory = SlowDirectory()
    issued = await CreateTenant(directory, FixedClock())("acme")
    authenticate = Authenticate(directory, ttl_s=60)

    answers = await asyncio.gather(
        *(authenticate(issued.api_key) for _ in range(20)),
        *(authenticate("jr_unknown-key") for _ in range(20)),
    )

    assert directory.lookups == 2  # one per key, not one per request
    assert all(a is not None and a.tenant_id == TenantId("acme") for a in answers[:20])
    assert answers[20:] == [None] * 20


async def test_a_cancelled_request_does_not_cancel_the_lookup_others_wait_for() -> None:
    directory = SlowDirectory()
    issued = await CreateTenant(directory, FixedClock())("acme")
    authenticate = Authenticate(directory, ttl_s=60)

    first = asyncio.ensure_future(authenticate(issued.api_key))
    second = asyncio.ensure_future(authenticate(issued.api_key))
    await asyncio.sleep(0)
    first.cancel()

    principal = await second
    assert principal is not None
    assert first.cancelled()
    assert authenticate.live(issued.api_key) == principal  # the lookup completed and cached


async def test_an_answer_that_arrives_after_forget_is_not_kept() -> None:
    directory = SlowDirectory()
    issued = await CreateTenant(directory, FixedClock())("acme")
    authenticate = Authenticate(directory, ttl_s=60)

    pending = asyncio.ensure_future(authenticate(issued.api_key))
    await asyncio.sleep(0)  # the lookup is under way
    authenticate.forget()  # e.g. the key was revoked meanwhile
    assert await pending is not None  # its caller still gets its answer

    assert authenticate.live(issued.api_key) is None  # but nothing was kept
    await authenticate(issued.api_key)
    assert directory.lookups == 2  # the next request looks again
