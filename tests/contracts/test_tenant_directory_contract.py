"""The tenant directory: the fake and the SQL directory (SQLite and Postgres) agree."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobrail.kernel.errors import ConflictError, InvalidInputError, NotFoundError
from jobrail.kernel.ids import TenantId
from jobrail.store.tenants import SqlaTenantDirectory
from jobrail.tenants.domain import digest
from jobrail.tenants.use_cases import CreateTenant, IssueApiKey, RevokeApiKey
from tests.fakes import FakeTenantDirectory, FixedClock
from tests.support.services import store_engine


@pytest.fixture(params=["fake", "sqlite", "postgres"])
async def directory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "fake":
        yield FakeTenantDirectory()
        return
    engine = await store_engine(request, tmp_path, "api_keys, tenants CASCADE")
    yield SqlaTenantDirectory(engine)
    await engine.dispose()


async def test_a_created_tenants_key_finds_it_until_revoked(directory: Any) -> None:
    clock = FixedClock()
    acme = await CreateTenant(directory, clock)("acme")
    ops = await CreateTenant(directory, clock)("ops", admin=True)
    other = await IssueApiKey(directory, clock)(TenantId("acme"))

    found = await directory.principal_for(digest(acme.api_key))
    assert (found.tenant_id, found.admin, found.key_id) == ("acme", False, acme.key_id)
    assert (await directory.principal_for(digest(ops.api_key))).admin is True
    assert await directory.principal_for(digest("jr_never-issued")) is None

    revoked = await RevokeApiKey(directory, clock)(acme.key_id)

    assert revoked.revoked_at == clock.now()
    assert await directory.principal_for(digest(acme.api_key)) is None
    assert (await directory.principal_for(digest(other.api_key))).tenant_id == "acme"
    keys = await directory.list_keys(TenantId("acme"))
    assert [(k.id, k.revoked_at is not None) for k in keys] == [
        (acme.key_id, True),
        (other.key_id, False),
    ]
    assert all(k.hint == acme.api_key[:9] + "…" for k in keys[:1])
    assert [t.id for t in await directory.list_tenants()] == ["acme", "ops"]


async def test_names_keys_and_revocations_are_checked(directory: Any) -> None:
    clock = FixedClock()
    await CreateTenant(directory, clock)("acme")

    with pytest.raises(ConflictError, match="already exists"):
        await CreateTenant(directory, clock)("acme")
    with pytest.raises(InvalidInputError, match="is invalid"):
        await CreateTenant(directory, clock)("Acme Corp")
    with pytest.raises(NotFoundError, match="tenant 'globex' not found"):
        await IssueApiKey(directory, clock)(TenantId("globex"))
    await IssueApiKey(directory, clock)(TenantId("acme"), key="chosen-key")
    with pytest.raises(ConflictError, match="already in use"):
        await IssueApiKey(directory, clock)(TenantId("acme"), key="chosen-key")
    with pytest.raises(InvalidInputError):
        await IssueApiKey(directory, clock)(TenantId("acme"), key="short")
    issued = await IssueApiKey(directory, clock)(TenantId("acme"))
    await RevokeApiKey(directory, clock)(issued.key_id)
    with pytest.raises(NotFoundError, match="no live API key"):
        await RevokeApiKey(directory, clock)(issued.key_id)
