"""One page job of a large account's sync (see SyncAccount and PageJobsPolicy)."""

from dataclasses import dataclass

from contexts.sync.application.use_cases import AccountSyncing, SyncAccountCommand
from contexts.sync.domain.account import Account


@dataclass(frozen=True, slots=True)
class SyncPageCommand:
    sync: SyncAccountCommand
    cursor: str | None
    """The page's cursor: the next cursor of the page before it (None: there was none)."""
    last: bool
    """The chain's last page job, which pages on to the end."""


@dataclass(frozen=True, slots=True)
class PageSynced:
    account: Account
    next_cursor: str | None
    new_items: int
    fetched: bool
    """False: the account ended before this page; nothing was fetched."""


class SyncPage(AccountSyncing):
    """Sync one page of a large account, as a step of its chain of page jobs.

    - The page at `cursor` is stored with the cursor after it, in one transaction
      (fenced by the job's lock, as every write of a sync); the account is synced once
      its last page is stored.
    - No cursor: the account ended before this page (the vendor has fewer pages than it
      said): nothing is fetched, and the account is not touched.
    - The chain's last job pages on to the end when the vendor has more than it said.
    - The vendor refusing the account fails it with its reason (and the chain stops).
    """

    async def __call__(self, cmd: SyncPageCommand) -> PageSynced:
        sync = cmd.sync
        if cmd.cursor is None:
            account = await self._current(sync)
            return PageSynced(account, next_cursor=None, new_items=0, fetched=False)
        page = await self._fetch(sync, cmd.cursor)
        account, new = await self._store_page(sync, page.items, page.next_cursor)
        if page.next_cursor is None:
            account = await self._record_finish(sync)
        elif cmd.last:
            await self._throttle.wait_turn(sync.tenant_id)
            account = await self._page_on(sync, page.next_cursor)
        return PageSynced(account, page.next_cursor, new_items=new, fetched=True)

    async def _current(self, sync: SyncAccountCommand) -> Account:
        async with self._uow:
            return await self._load(sync)
