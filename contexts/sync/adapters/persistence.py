from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Integer,
    String,
    Table,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from contexts.schema import metadata
from contexts.sync.application.ports import VendorItem
from contexts.sync.domain.account import Account, AccountStatus
from jobrail.kernel.clock import Clock
from jobrail.kernel.ids import TenantId
from jobrail.sql import SqlaUnitOfWork, UtcDateTime, database_errors, upsert_insert

accounts = Table(
    "sync_accounts",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("account_id", String(255), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("cursor", String(255)),
    Column("items_synced", Integer, nullable=False),
    Column("last_synced_at", UtcDateTime),
    Column("last_error", String(1000)),
    Column("fence", BigInteger, nullable=False),
    Column("syncs_started", Integer, nullable=False),
)

items = Table(
    "sync_items",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("account_id", String(255), primary_key=True),
    Column("item_id", String(255), primary_key=True),
    Column("data", JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    Column("synced_at", UtcDateTime, nullable=False),
)


def _state(account: Account) -> dict[str, Any]:
    return {
        "status": account.status.value,
        "cursor": account.cursor,
        "items_synced": account.items_synced,
        "last_synced_at": account.last_synced_at,
        "last_error": account.last_error,
        "fence": account.fence,
        "syncs_started": account.syncs_started,
    }


def _account(row: Any) -> Account:
    return Account(
        tenant_id=TenantId(row.tenant_id),
        account_id=row.account_id,
        status=AccountStatus(row.status),
        cursor=row.cursor,
        items_synced=row.items_synced,
        last_synced_at=row.last_synced_at,
        last_error=row.last_error,
        fence=row.fence,
        syncs_started=row.syncs_started,
    )


class SqlaAccountRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def get(
        self, tenant_id: TenantId, account_id: str, *, for_update: bool = False
    ) -> Account | None:
        query = select(accounts).where(
            accounts.c.tenant_id == tenant_id, accounts.c.account_id == account_id
        )
        if for_update:
            query = query.with_for_update()
        with database_errors():
            row = (await self._session.execute(query)).first()
        return _account(row) if row else None

    async def get_or_add(self, tenant_id: TenantId, account_id: str) -> Account:
        fresh = Account(tenant_id=tenant_id, account_id=account_id)
        statement = (
            upsert_insert(self._session.get_bind().dialect.name, accounts)
            .values(tenant_id=tenant_id, account_id=account_id, **_state(fresh))
            .on_conflict_do_nothing(index_elements=["tenant_id", "account_id"])
        )
        with database_errors():
            await self._session.execute(statement)
        account = await self.get(tenant_id, account_id, for_update=True)
        assert account is not None
        return account

    async def save(self, account: Account) -> None:
        with database_errors():
            await self._session.execute(
                update(accounts)
                .where(
                    accounts.c.tenant_id == account.tenant_id,
                    accounts.c.account_id == account.account_id,
                )
                .values(_state(account))
            )


class SqlaItemStore:
    def __init__(self, session: AsyncSession, clock: Clock) -> None:
        self._session = session
        self._clock = clock

    async def store(self, tenant_id: TenantId, account_id: str, page: Sequence[VendorItem]) -> int:
        if not page:
            return 0
        ids = [item.id for item in page]
        now = self._clock.now()
        with database_errors():
            known = set(
                (
                    await self._session.execute(
                        select(items.c.item_id).where(
                            items.c.tenant_id == tenant_id,
                            items.c.account_id == account_id,
                            items.c.item_id.in_(ids),
                        )
                    )
                ).scalars()
            )
            insert = upsert_insert(self._session.get_bind().dialect.name, items)
            await self._session.execute(
                insert.on_conflict_do_update(
                    index_elements=["tenant_id", "account_id", "item_id"],
                    set_={"data": insert.excluded.data, "synced_at": insert.excluded.synced_at},
                ),
                [
                    {
                        "tenant_id": tenant_id,
                        "account_id": account_id,
                        "item_id": item.id,
                        "data": dict(item.data),
                        "synced_at": now,
                    }
                    for item in page
                ],
            )
        return len(set(ids) - known)

    async def count(self, tenant_id: TenantId, account_id: str) -> int:
        with database_errors():
            value = await self._session.scalar(
                select(func.count())
                .select_from(items)
                .where(items.c.tenant_id == tenant_id, items.c.account_id == account_id)
            )
        return int(value or 0)


class SqlaSyncUnitOfWork(SqlaUnitOfWork):
    accounts: SqlaAccountRepository
    items: SqlaItemStore

    async def __aenter__(self) -> "SqlaSyncUnitOfWork":
        await super().__aenter__()
        self.accounts = SqlaAccountRepository(self.session)
        self.items = SqlaItemStore(self.session, self._clock)
        return self
