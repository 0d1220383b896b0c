"""Sync's use cases."""

from collections.abc import Sequence
from dataclasses import dataclass

from contexts.sync.application.ports import (
    SyncUnitOfWork,
    VendorClient,
    VendorItem,
    VendorThrottle,
)
from contexts.sync.domain.account import Account
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError, PermanentError
from jobrail.kernel.ids import TenantId
from jobrail.ports import EnqueueJobCommand, Job

SYNC_JOB = "sync.account"


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


class SyncAccount:
    """Page through the vendor and store every item of the account.

    - Each page is stored with the cursor that follows it, in one transaction: a sync
      that stops midway resumes where it stopped, and no page is stored twice.
    - Every write is fenced by the sync's lock: a holder that lost it cannot write.
    - The vendor refusing the account (a 4xx other than 429) fails the sync with its
      reason; throttling and outages make it wait and resume.
    - Every vendor call spends one token of the tenant's vendor budget (the job's
      admission pays for the first).
    """

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

    async def __call__(self, cmd: SyncAccountCommand) -> Account:
        async with self._uow:
            account = await self._uow.accounts.get_or_add(cmd.tenant_id, cmd.account_id)
            account.start_sync(cmd.fence)
            await self._uow.accounts.save(account)
            await self._uow.commit()
        cursor = account.cursor
        first_call = True
        while True:
            if not first_call:  # the job's admission paid for the first call
                await self._throttle.wait_turn(cmd.tenant_id)
            first_call = False
            try:
                page = await self._vendor.fetch_page(cmd.account_id, cursor)
            except PermanentError as refused:
                await self._record_failure(cmd, str(refused))
                raise
            account = await self._store_page(cmd, page.items, page.next_cursor)
            cursor = page.next_cursor
            if cursor is None:
                break
        return await self._record_finish(cmd)

    async def _store_page(
        self, cmd: SyncAccountCommand, items: Sequence[VendorItem], next_cursor: str | None
    ) -> Account:
        async with self._uow:
            account = await self._load(cmd)
            new = await self._uow.items.store(cmd.tenant_id, cmd.account_id, items)
            account.page_stored(new, next_cursor, cmd.fence)
            await self._uow.accounts.save(account)
            await self._uow.commit()
        return account

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
