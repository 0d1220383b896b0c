"""Sync's use cases."""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from contexts.sync.application.ports import (
    SyncUnitOfWork,
    VendorClient,
    VendorItem,
    VendorPage,
    VendorThrottle,
)
from contexts.sync.domain.account import Account
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError, PermanentError
from jobrail.kernel.ids import TenantId
from jobrail.ports import ChainCommand, EnqueueJobCommand, FlowJob, Job

SYNC_JOB = "sync.account"
SYNC_PAGE_JOB = "sync.page"
MAX_PAGE_JOBS = 1000
"""The most page jobs a large account's chain has; its last one pages on to the end."""


@dataclass(frozen=True, slots=True)
class AccountRef:
    tenant_id: TenantId
    account_id: str


@dataclass(frozen=True, slots=True)
class SyncAccountCommand:
    tenant_id: TenantId
    account_id: str
    fence: int


class RequestSync:
    """Ask for a sync of an account; it runs as a job.

    - Idempotent while a sync is pending: asking again before it starts returns the
      same job. Asking while one runs queues one more, which waits for the first.
    """

    def __init__(self, uow: SyncUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, ref: AccountRef) -> Job:
        async with self._uow:
            account = await self._uow.accounts.get_or_add(ref.tenant_id, ref.account_id)
            result = await self._uow.queue.enqueue(
                EnqueueJobCommand(
                    tenant_id=ref.tenant_id,
                    type=SYNC_JOB,
                    payload={"account_id": ref.account_id},
                    idempotency_key=f"sync:{ref.account_id}:{account.syncs_started}",
                    entity_id=ref.account_id,
                )
            )
            await self._uow.commit()
        return result.job


@dataclass(frozen=True, slots=True)
class PageJobsPolicy:
    """When a sync runs as page jobs: a fresh sync of an account that has at least
    `from_pages` pages (as the vendor says on the first page)."""

    from_pages: int

    def splits(self, first: VendorPage) -> bool:
        return (
            first.next_cursor is not None
            and first.pages is not None
            and first.pages >= self.from_pages
        )


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    account: Account
    chain_id: uuid.UUID | None = None
    """A large account's chain of page jobs, which syncs the pages after the first."""


class AccountSyncing:
    """What a sync and a page job of one both do: fetch a page, store it with the
    cursor after it (fenced), finish the account, or fail it with the vendor's reason."""

    def __init__(
        self,
        uow: SyncUnitOfWork,
        vendor: VendorClient,
        throttle: VendorThrottle,
        clock: Clock,
    ) -> None:
        self._uow = uow
        self._vendor = vendor
        self._throttle = throttle
        self._clock = clock

    async def _fetch(self, cmd: SyncAccountCommand, cursor: str | None) -> VendorPage:
        try:
            return await self._vendor.fetch_page(cmd.account_id, cursor)
        except PermanentError as refused:
            await self._record_failure(cmd, str(refused))
            raise

    async def _page_on(self, cmd: SyncAccountCommand, cursor: str | None) -> Account:
        """Fetch and store the pages from `cursor` to the end (a call before each
        waits its turn: the job's admission paid for the first), then finish."""
        first_call = True
        while True:
            if not first_call:
                await self._throttle.wait_turn(cmd.tenant_id)
            first_call = False
            page = await self._fetch(cmd, cursor)
            await self._store_page(cmd, page.items, page.next_cursor)
            cursor = page.next_cursor
            if cursor is None:
                return await self._record_finish(cmd)

    async def _store_page(
        self, cmd: SyncAccountCommand, items: Sequence[VendorItem], next_cursor: str | None
    ) -> tuple[Account, int]:
        async with self._uow:
            account = await self._load(cmd)
            new = await self._uow.items.store(cmd.tenant_id, cmd.account_id, items)
            account.page_stored(new, next_cursor, cmd.fence)
            await self._uow.accounts.save(account)
            await self._uow.commit()
        return account, new

    async def _record_finish(self, cmd: SyncAccountCommand) -> Account:
        async with self._uow:
            account = await self._load(cmd)
            account.finish(self._clock.now(), cmd.fence)
            await self._uow.accounts.save(account)
            await self._uow.commit()
        return account

    async def _record_failure(self, cmd: SyncAccountCommand, reason: str) -> None:
        async with self._uow:
            account = await self._load(cmd)
            account.fail(reason, cmd.fence)
            await self._uow.accounts.save(account)
            await self._uow.commit()

    async def _load(self, cmd: SyncAccountCommand) -> Account:
        account = await self._uow.accounts.get(cmd.tenant_id, cmd.account_id, for_update=True)
        if account is None:
            raise NotFoundError(f"account {cmd.account_id} not found")
        return account


class SyncAccount(AccountSyncing):
    """Page through the vendor and store every item of the account.

    - Each page is stored with the cursor that follows it, in one transaction: a sync
      that stops midway resumes where it stopped, and no page is stored twice.
    - Every write is fenced by the sync's lock: a holder that lost it cannot write.
    - The vendor refusing the account (a 4xx other than 429) fails the sync with its
      reason; throttling and outages make it wait and resume.
    - Every vendor call spends one token of the tenant's vendor budget (the job's
      admission pays for the first).
    - A large account (see PageJobsPolicy) is synced as page jobs: the first page is
      stored here, with a chain of one ``sync.page`` job per page after it (at most
      MAX_PAGE_JOBS; the last pages on to the end), in the same transaction.
    """

    def __init__(
        self,
        uow: SyncUnitOfWork,
        vendor: VendorClient,
        throttle: VendorThrottle,
        clock: Clock,
        policy: PageJobsPolicy,
    ) -> None:
        super().__init__(uow, vendor, throttle, clock)
        self._policy = policy

    async def __call__(self, cmd: SyncAccountCommand) -> SyncOutcome:
        async with self._uow:
            account = await self._uow.accounts.get_or_add(cmd.tenant_id, cmd.account_id)
            account.start_sync(cmd.fence)
            await self._uow.accounts.save(account)
            await self._uow.commit()
        if account.cursor is not None:  # resuming: no new plan
            return SyncOutcome(await self._page_on(cmd, account.cursor))
        first = await self._fetch(cmd, None)
        if not self._policy.splits(first):
            account, _ = await self._store_page(cmd, first.items, first.next_cursor)
            if first.next_cursor is None:
                return SyncOutcome(await self._record_finish(cmd))
            await self._throttle.wait_turn(cmd.tenant_id)
            return SyncOutcome(await self._page_on(cmd, first.next_cursor))
        return await self._store_and_chain(cmd, first)

    async def _store_and_chain(self, cmd: SyncAccountCommand, first: VendorPage) -> SyncOutcome:
        assert first.pages is not None  # the policy splits only when the vendor says
        steps = min(first.pages - 1, MAX_PAGE_JOBS)
        async with self._uow:
            account = await self._load(cmd)
            new = await self._uow.items.store(cmd.tenant_id, cmd.account_id, first.items)
            account.page_stored(new, first.next_cursor, cmd.fence)
            await self._uow.accounts.save(account)
            started = await self._uow.workflows.chain(
                ChainCommand(
                    tenant_id=cmd.tenant_id,
                    steps=[
                        FlowJob(
                            SYNC_PAGE_JOB,
                            {
                                "account_id": cmd.account_id,
                                "page": step + 2,
                                "pages": first.pages,
                                "cursor": first.next_cursor if step == 0 else None,
                                "last": step == steps - 1,
                            },
                            entity_id=cmd.account_id,
                        )
                        for step in range(steps)
                    ],
                    idempotency_key=f"sync-pages:{cmd.account_id}:{account.syncs_started}",
                    name=f"sync of {cmd.account_id} ({first.pages} pages)",
                )
            )
            await self._uow.commit()
        return SyncOutcome(account, chain_id=started.flow.id)


class GetAccount:
    """An account of the tenant that a sync was asked for; otherwise not found."""

    def __init__(self, uow: SyncUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, ref: AccountRef) -> Account:
        async with self._uow:
            account = await self._uow.accounts.get(ref.tenant_id, ref.account_id)
        if account is None:
            raise NotFoundError(f"account {ref.account_id} not found")
        return account
