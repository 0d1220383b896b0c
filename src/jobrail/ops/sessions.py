"""The ops page's sessions on SQLAlchemy (Postgres or SQLite): see jobrail.ops.console.

In the database rather than in Redis: every API replica shares it, the embedded mode
(which has no Redis) uses the same code, and checking a session is one query that joins
the key it was made with, so a revoked key (or a tenant no longer admin) ends the session
on the next request, with no cache in between.
"""

import uuid
from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import TenantId
from jobrail.store.errors import database_errors
from jobrail.store.tables import api_keys, ops_sessions, tenants
from jobrail.tenants.domain import Principal


class SqlaOpsSessions:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def start(
        self, session_digest: str, key_id: uuid.UUID, now: datetime, expires_at: datetime
    ) -> None:
        """Store a new session; sessions that have expired go at the same time, so the
        table holds only live ones (and those of revoked keys until they expire)."""
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(delete(ops_sessions).where(ops_sessions.c.expires_at <= now))
                await conn.execute(
                    insert(ops_sessions).values(
                        digest=session_digest, key_id=key_id, created_at=now, expires_at=expires_at
                    )
                )

    async def principal_for(self, session_digest: str, now: datetime) -> Principal | None:
        """The admin of a live session: not expired, its key not revoked, its tenant
        still an admin. None otherwise."""
        query = (
            select(api_keys.c.id, api_keys.c.tenant_id)
            .select_from(ops_sessions)
            .join(api_keys, api_keys.c.id == ops_sessions.c.key_id)
            .join(tenants, tenants.c.id == api_keys.c.tenant_id)
            .where(
                ops_sessions.c.digest == session_digest,
                ops_sessions.c.expires_at > now,
                api_keys.c.revoked_at.is_(None),
                tenants.c.admin,
            )
        )
        with database_errors():
            async with self._engine.connect() as conn:
                row = (await conn.execute(query)).first()
        if row is None:
            return None
        return Principal(tenant_id=TenantId(row.tenant_id), admin=True, key_id=row.id)

    async def end(self, session_digest: str) -> None:
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(
                    delete(ops_sessions).where(ops_sessions.c.digest == session_digest)
                )
