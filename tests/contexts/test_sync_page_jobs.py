"""A large account's sync as page jobs, with fakes: the sync's job stores the first page
and starts the chain in one transaction; each page job stores its page once."""

import pytest

from contexts.sync.application.page_jobs import SyncPage, SyncPageCommand
from contexts.sync.application.ports import VendorPage
from contexts.sync.application.use_cases import (
    SYNC_PAGE_JOB,
    PageJobsPolicy,
    SyncAccount,
    SyncAccountCommand,
)
from contexts.sync.domain.account import AccountStatus
from jobrail.kernel.errors import PermanentError
from jobrail.kernel.ids import TenantId
from jobrail.ports import ChainCommand
from tests.contexts.fakes import FakeSyncUnitOfWork, FakeThrottle, FakeVendorClient
from tests.fakes import FixedClock

ACME = TenantId("acme")


def test_a_sync_splits_when_the_vendor_says_the_account_has_enough_pages() -> None:
    policy = PageJobsPolicy(from_pages=5)

    assert policy.splits(VendorPage(items=[], next_cursor="p1", pages=5))
    assert not policy.splits(VendorPage(items=[], next_cursor="p1", pages=4))
    assert not policy.splits(VendorPage(items=[], next_cursor="p1", pages=None))
    assert not policy.splits(VendorPage(items=[], next_cursor=None, pages=9))


async def test_a_large_accounts_sync_stores_its_first_page_and_chains_the_rest() -> None:
    uow, vendor, throttle = FakeSyncUnitOfWork(), FakeVendorClient(pages=8), FakeThrottle()
    sync = SyncAccount(uow, vendor, throttle, FixedClock(), PageJobsPolicy(from_pages=5))

    outcome = await sync(SyncAccountCommand(ACME, "big", fence=1))

    assert vendor.calls == [("big", None)]
    assert throttle.turns == 0
    assert (outcome.account.status, outcome.account.items_synced) == (AccountStatus.SYNCING, 10)
    assert outcome.account.cursor == "p1"
    assert len(uow.items_store) == 10
    [(cmd, started)] = uow.committed_flows
    assert isinstance(cmd, ChainCommand)
    assert outcome.chain_id == started.flow.id
    assert cmd.idempotency_key == "sync-pages:big:1"
    assert [step.type for step in cmd.steps] == [SYNC_PAGE_JOB] * 7
    assert [step.payload for step in cmd.steps] == [
        {
            "account_id": "big",
            "page": n,
            "pages": 8,
            "cursor": "p1" if n == 2 else None,
            "last": n == 8,
        }
        for n in range(2, 9)
    ]


async def test_an_account_below_the_threshold_syncs_in_one_job() -> None:
    uow, vendor = FakeSyncUnitOfWork(), FakeVendorClient(pages=4)
    sync = SyncAccount(uow, vendor, FakeThrottle(), FixedClock(), PageJobsPolicy(from_pages=5))

    outcome = await sync(SyncAccountCommand(ACME, "small", fence=1))

    assert outcome.chain_id is None
    assert (outcome.account.status, outcome.account.items_synced) == (AccountStatus.SYNCED, 40)
    assert uow.committed_flows == []


async def _chained(pages: int) -> tuple[FakeSyncUnitOfWork, FakeVendorClient]:
    uow, vendor = FakeSyncUnitOfWork(), FakeVendorClient(pages=pages)
    sync = SyncAccount(uow, vendor, FakeThrottle(), FixedClock(), PageJobsPolicy(from_pages=2))
    await sync(SyncAccountCommand(ACME, "big", fence=1))
    return uow, vendor


async def test_each_page_job_stores_its_page_and_the_last_finishes_the_account() -> None:
    uow, vendor = await _chained(pages=3)
    page = SyncPage(uow, vendor, FakeThrottle(), FixedClock())

    second = await page(SyncPageCommand(SyncAccountCommand(ACME, "big", 2), "p1", last=False))
    again = await page(SyncPageCommand(SyncAccountCommand(ACME, "big", 3), "p1", last=False))
    third = await page(SyncPageCommand(SyncAccountCommand(ACME, "big", 4), "p2", last=True))

    assert (second.next_cursor, second.new_items, second.fetched) == ("p2", 10, True)
    assert again.new_items == 0  # a retried page job stores nothing twice
    assert third.next_cursor is None
    assert (third.account.status, third.account.items_synced) == (AccountStatus.SYNCED, 30)
    assert len(uow.items_store) == 30


async def test_a_page_job_after_the_accounts_end_fetches_nothing() -> None:
    uow, vendor = await _chained(pages=3)
    calls = len(vendor.calls)

    synced = await SyncPage(uow, vendor, FakeThrottle(), FixedClock())(
        SyncPageCommand(SyncAccountCommand(ACME, "big", 2), None, last=True)
    )

    assert not synced.fetched
    assert len(vendor.calls) == calls
    assert synced.account.items_synced == 10


async def test_the_last_page_job_pages_on_when_the_vendor_has_more_than_it_said() -> None:
    uow, vendor = await _chained(pages=3)
    vendor.pages = 5  # the account grew since its first page
    throttle = FakeThrottle()

    synced = await SyncPage(uow, vendor, throttle, FixedClock())(
        SyncPageCommand(SyncAccountCommand(ACME, "big", 2), "p1", last=True)
    )

    assert [c for _, c in vendor.calls] == [None, "p1", "p2", "p3", "p4"]
    assert throttle.turns == 3  # the job's admission paid for its first call
    assert (synced.account.status, synced.account.items_synced) == (AccountStatus.SYNCED, 50)


async def test_a_refused_page_fails_the_account_with_the_reason() -> None:
    uow, vendor = await _chained(pages=3)
    vendor.failures[len(vendor.calls) + 1] = PermanentError("vendor refused: suspended")

    with pytest.raises(PermanentError):
        await SyncPage(uow, vendor, FakeThrottle(), FixedClock())(
            SyncPageCommand(SyncAccountCommand(ACME, "big", 2), "p1", last=False)
        )

    account = uow.accounts_store[(ACME, "big")]
    assert account.status is AccountStatus.FAILED
    assert "suspended" in (account.last_error or "")
