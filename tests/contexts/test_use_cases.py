"""The contexts' use cases with hand-written fakes; assertions on state."""

import pytest

from contexts.billing.application.commands import (
    CreateInvoiceCommand,
    InvoiceCommand,
    LineInput,
    ListInvoicesQuery,
)
from contexts.billing.application.use_cases import (
    CreateInvoice,
    GetInvoice,
    IssueInvoice,
    ListInvoices,
    PayInvoice,
)
from contexts.billing.domain.invoice import InvoiceStatus
from contexts.notifications.application.use_cases import (
    ListNotifications,
    ListNotificationsQuery,
    SendReceipt,
    SendReceiptCommand,
)
from contexts.notifications.domain.notification import NotificationStatus
from contexts.shared.events import InvoicePaidV1
from contexts.sync.application.use_cases import (
    AccountRef,
    PageJobsPolicy,
    RequestSync,
    SyncAccount,
    SyncAccountCommand,
)
from contexts.sync.domain.account import AccountStatus, StaleHolderError
from jobrail.kernel.errors import (
    InvalidInputError,
    NotFoundError,
    PermanentError,
    ThrottledError,
    TransientError,
)
from jobrail.kernel.ids import TenantId
from tests.contexts.fakes import (
    FakeBillingUnitOfWork,
    FakeEmailSender,
    FakeNotificationsUnitOfWork,
    FakeSyncUnitOfWork,
    FakeThrottle,
    FakeVendorClient,
)
from tests.fakes import FixedClock

ACME = TenantId("acme")
NO_PAGE_JOBS = PageJobsPolicy(from_pages=1000)


async def _issued(uow: FakeBillingUnitOfWork, clock: FixedClock) -> InvoiceCommand:
    invoice = await CreateInvoice(uow, clock)(
        CreateInvoiceCommand(ACME, "c1", "c1@example.com", "EUR", (LineInput("widget", 3, 1000),))
    )
    cmd = InvoiceCommand(ACME, invoice.id)
    await IssueInvoice(uow, clock)(cmd)
    return cmd


async def test_paying_publishes_invoice_paid_once() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()
    cmd = await _issued(uow, clock)

    first = await PayInvoice(uow, clock)(cmd)
    again = await PayInvoice(uow, clock)(cmd)

    assert first.status is again.status is InvoiceStatus.PAID
    assert uow.store[cmd.invoice_id].status is InvoiceStatus.PAID
    [event] = uow.committed_events
    assert isinstance(event, InvoicePaidV1)
    assert event.amount_minor == 3000
    assert event.invoice_id == str(cmd.invoice_id)
    assert event.customer_email == "c1@example.com"


async def test_a_negative_price_is_refused_before_anything_is_written() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()

    with pytest.raises(InvalidInputError, match="never negative"):
        await CreateInvoice(uow, clock)(
            CreateInvoiceCommand(ACME, "c1", "c@x.io", "EUR", (LineInput("x", 1, -5),))
        )
    assert uow.commits == 0


async def test_another_tenants_invoice_is_not_found() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()
    cmd = await _issued(uow, clock)

    with pytest.raises(NotFoundError):
        await GetInvoice(uow)(InvoiceCommand(TenantId("globex"), cmd.invoice_id))
    with pytest.raises(NotFoundError):
        await PayInvoice(uow, clock)(InvoiceCommand(TenantId("globex"), cmd.invoice_id))
    assert uow.committed_events == []


async def test_invoices_are_listed_by_status() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()
    paid = await _issued(uow, clock)
    await PayInvoice(uow, clock)(paid)
    await _issued(uow, clock)

    page = await ListInvoices(uow)(ListInvoicesQuery(ACME, status=InvoiceStatus.PAID))

    assert [i.id for i in page.items] == [paid.invoice_id]


def _receipt(event_id: str = "e1") -> SendReceiptCommand:
    return SendReceiptCommand(ACME, event_id, "inv-1", "c1@example.com", 12345, "EUR")


async def test_a_receipt_is_sent_once_even_when_the_event_comes_twice() -> None:
    uow, sender, clock = FakeNotificationsUnitOfWork(), FakeEmailSender(), FixedClock()
    send = SendReceipt(uow, sender, clock)

    await send(_receipt())
    await send(_receipt())

    [message] = sender.sent
    assert message.recipient == "c1@example.com"
    assert "123.45 EUR" in message.body
    [notification] = uow.store.values()
    assert notification.status is NotificationStatus.SENT
    assert notification.attempts == 1


async def test_a_receipt_that_failed_to_send_is_sent_on_the_retry() -> None:
    uow, clock = FakeNotificationsUnitOfWork(), FixedClock()
    sender = FakeEmailSender(fail_with=[TransientError("421 busy")])
    send = SendReceipt(uow, sender, clock)

    with pytest.raises(TransientError):
        await send(_receipt())
    [pending] = uow.store.values()
    assert pending.status is NotificationStatus.PENDING
    assert pending.last_error == "421 busy"

    await send(_receipt())

    assert len(sender.sent) == 1
    [sent] = uow.store.values()
    assert sent.status is NotificationStatus.SENT
    assert sent.attempts == 2


async def test_a_rejected_recipient_fails_the_notification_until_its_job_is_redriven() -> None:
    uow, clock = FakeNotificationsUnitOfWork(), FixedClock()
    sender = FakeEmailSender(fail_with=[PermanentError("550 unknown")])
    send = SendReceipt(uow, sender, clock)

    with pytest.raises(PermanentError):
        await send(_receipt())
    [failed] = uow.store.values()
    assert failed.status is NotificationStatus.FAILED
    listed = await ListNotifications(uow)(ListNotificationsQuery(ACME, invoice_id="inv-1"))
    assert [n.id for n in listed] == [failed.id]

    await send(_receipt())  # the job was redriven (the address was fixed)

    [sent] = uow.store.values()
    assert sent.status is NotificationStatus.SENT
    assert len(sender.sent) == 1


async def test_a_sync_stores_every_page_once_and_finishes() -> None:
    uow, vendor, throttle, clock = (
        FakeSyncUnitOfWork(),
        FakeVendorClient(pages=5),
        FakeThrottle(),
        FixedClock(),
    )

    outcome = await SyncAccount(uow, vendor, throttle, clock, NO_PAGE_JOBS)(
        SyncAccountCommand(ACME, "a1", fence=1)
    )
    account = outcome.account

    assert account.status is AccountStatus.SYNCED
    assert account.items_synced == 50
    assert len(uow.items_store) == 50
    assert [c for _, c in vendor.calls] == [None, "p1", "p2", "p3", "p4"]
    assert throttle.turns == 4  # the first call was paid for when the job was admitted


async def test_an_interrupted_sync_resumes_from_its_cursor_without_storing_twice() -> None:
    uow, clock = FakeSyncUnitOfWork(), FixedClock()
    vendor = FakeVendorClient(pages=4)
    vendor.failures[3] = ThrottledError("429", retry_after_s=1)
    sync = SyncAccount(uow, vendor, FakeThrottle(), clock, NO_PAGE_JOBS)

    with pytest.raises(ThrottledError):
        await sync(SyncAccountCommand(ACME, "a1", fence=1))
    account = (await sync(SyncAccountCommand(ACME, "a1", fence=2))).account

    assert [c for _, c in vendor.calls] == [None, "p1", "p2", "p2", "p3"]
    assert account.items_synced == 40
    assert len(uow.items_store) == 40


async def test_a_vendor_refusal_fails_the_account_with_the_reason() -> None:
    uow, clock = FakeSyncUnitOfWork(), FixedClock()

    with pytest.raises(PermanentError, match="suspended"):
        await SyncAccount(uow, FakeVendorClient(), FakeThrottle(), clock, NO_PAGE_JOBS)(
            SyncAccountCommand(ACME, "bad-1", fence=1)
        )

    account = uow.accounts_store[(ACME, "bad-1")]
    assert account.status is AccountStatus.FAILED
    assert "suspended" in (account.last_error or "")


async def test_a_stale_holder_cannot_write_pages() -> None:
    uow, clock = FakeSyncUnitOfWork(), FixedClock()
    sync = SyncAccount(uow, FakeVendorClient(pages=2), FakeThrottle(), clock, NO_PAGE_JOBS)
    await sync(SyncAccountCommand(ACME, "a1", fence=5))

    with pytest.raises(StaleHolderError):
        await sync(SyncAccountCommand(ACME, "a1", fence=4))


async def test_asking_twice_before_the_sync_starts_gives_the_same_job() -> None:
    uow = FakeSyncUnitOfWork()
    request = RequestSync(uow)

    first = await request(AccountRef(ACME, "a1"))
    second = await request(AccountRef(ACME, "a1"))
    uow.accounts_store[(ACME, "a1")].start_sync(fence=1)  # the sync starts
    third = await request(AccountRef(ACME, "a1"))

    assert first.id == second.id
    assert third.id != first.id
    assert first.entity_id == "a1"
