"""The tenant directory on SQLAlchemy (Postgres or SQLite)."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import TenantId
from jobrail.store.errors import database_errors
from jobrail.store.tables import api_keys, tenants
from jobrail.tenants.domain import ApiKeyInfo, Principal, Tenant
from jobrail.tenants.ports import KeyExistsError, TenantExistsError


def _key(row: Any) -> ApiKeyInfo:
    return ApiKeyInfo(
        id=row.id,
        tenant_id=TenantId(row.tenant_id),
        hint=row.hint,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def _tenant(row: Any) -> Tenant:
    return Tenant(
        id=TenantId(row.id),
        admin=row.admin,
        created_at=row.created_at,
        max_queued=row.max_queued,
        weight=row.weight,
    )


class SqlaTenantDirectory:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create_tenant(self, tenant: Tenant) -> None:
        with database_errors():
            async with self._engine.begin() as conn:
                try:
                    await conn.execute(
                        insert(tenants).values(
                            id=tenant.id, admin=tenant.admin, created_at=tenant.created_at
                        )
                    )
                except IntegrityError:
                    raise TenantExistsError(tenant.id) from None

    async def get_tenant(self, tenant_id: TenantId) -> Tenant | None:
        with database_errors():
            async with self._engine.connect() as conn:
                row = (await conn.execute(select(tenants).where(tenants.c.id == tenant_id))).first()
        return _tenant(row) if row else None

    async def list_tenants(self) -> list[Tenant]:
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(select(tenants).order_by(tenants.c.id))).all()
        return [_tenant(row) for row in rows]

    async def set_max_queued(self, tenant_id: TenantId, cap: int | None) -> Tenant | None:
        return await self._set(tenant_id, max_queued=cap)

    async def set_weight(self, tenant_id: TenantId, weight: float | None) -> Tenant | None:
        return await self._set(tenant_id, weight=weight)

    async def _set(self, tenant_id: TenantId, **values: object) -> Tenant | None:
        with database_errors():
            async with self._engine.begin() as conn:
                row = (
                    await conn.execute(
                        update(tenants)
                        .where(tenants.c.id == tenant_id)
                        .values(**values)
                        .returning(*tenants.c)
                    )
                ).first()
        return _tenant(row) if row else None

    async def add_key(self, key: ApiKeyInfo, key_digest: str) -> None:
        with database_errors():
            async with self._engine.begin() as conn:
                try:
                    await conn.execute(
                        insert(api_keys).values(
                            id=key.id,
                            tenant_id=key.tenant_id,
                            digest=key_digest,
                            hint=key.hint,
                            created_at=key.created_at,
                        )
                    )
                except IntegrityError:
                    raise KeyExistsError(key.hint) from None

    async def revoke_key(self, key_id: uuid.UUID, at: datetime) -> ApiKeyInfo | None:
        with database_errors():
            async with self._engine.begin() as conn:
                row = (
                    await conn.execute(
                        update(api_keys)
                        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                        .values(revoked_at=at)
                        .returning(*api_keys.c)
                    )
                ).first()
        return _key(row) if row else None

    async def list_keys(self, tenant_id: TenantId) -> list[ApiKeyInfo]:
        query = (
            select(api_keys)
            .where(api_keys.c.tenant_id == tenant_id)
            .order_by(api_keys.c.created_at)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [_key(row) for row in rows]

    async def principal_for(self, key_digest: str) -> Principal | None:
        query = (
            select(api_keys.c.id, api_keys.c.tenant_id, tenants.c.admin)
            .join(tenants, tenants.c.id == api_keys.c.tenant_id)
            .where(api_keys.c.digest == key_digest, api_keys.c.revoked_at.is_(None))
        )
        with database_errors():
            async with self._engine.connect() as conn:
                row = (await conn.execute(query)).first()
        if row is None:
            return None
        return Principal(tenant_id=TenantId(row.tenant_id), admin=row.admin, key_id=row.id)
