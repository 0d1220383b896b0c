from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self

from contexts.sync.domain.account import Account
from jobrail.kernel.ids import TenantId
from jobrail.ports import ChainCommand, FlowStarted, JobQueue


@dataclass(frozen=True, slots=True)
class VendorItem:
    id: str
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class VendorPage:
    items: Sequence[VendorItem]
    next_cursor: str | None
    pages: int | None = None
    """How many pages the account has in all, when the vendor says."""


class VendorClient(Protocol):
    async def fetch_page(self, account_id: str, cursor: str | None) -> VendorPage:
        """One page of the account's items. Raises ThrottledError on the vendor's 429,
        TransientError on 5xx and network trouble, PermanentError on other 4xx (with
        the vendor's reason)."""
        ...


class VendorThrottle(Protocol):
    async def wait_turn(self, tenant_id: TenantId) -> None:
        """Wait until the tenant's vendor budget allows one more call."""
        ...


class AccountRepository(Protocol):
    async def get(
        self, tenant_id: TenantId, account_id: str, *, for_update: bool = False
    ) -> Account | None: ...

    async def get_or_add(self, tenant_id: TenantId, account_id: str) -> Account:
        """The account, created (never synced) if it is new; locked until commit."""
        ...

    async def save(self, account: Account) -> None: ...


class ItemStore(Protocol):
    async def store(self, tenant_id: TenantId, account_id: str, items: Sequence[VendorItem]) -> int:
        """Store (or refresh) the items; return how many were new."""
        ...


class Workflows(Protocol):
    async def chain(self, cmd: ChainCommand) -> FlowStarted:
        """Start a chain in the current transaction (its jobs commit with it)."""
        ...


class SyncUnitOfWork(Protocol):
    accounts: AccountRepository
    items: ItemStore
    queue: JobQueue
    workflows: Workflows

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def commit(self) -> None: ...
