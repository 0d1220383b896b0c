"""The fakes and the real adapters pass the same contract tests."""

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from contexts.billing.adapters.month_end_runs import SqlaMonthEndRunRepository
from contexts.billing.adapters.persistence import SqlaInvoiceRepository
from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceLine, InvoiceStatus
from contexts.billing.domain.month_end import BillingMonth, MonthEndRun, MonthEndRunStatus
from contexts.notifications.adapters.email import SmtpEmailSender
from contexts.notifications.adapters.settings import NotificationsSettings
from contexts.notifications.application.ports import EmailMessage
from contexts.sync.adapters.vendor import HttpVendorClient
from jobrail.kernel.errors import PermanentError, ThrottledError
from jobrail.kernel.ids import TenantId
from jobrail.kernel.money import Money
from jobrail.outbox.inbox import SqlaInbox
from tests.contexts.fakes import (
    FakeEmailSender,
    FakeInbox,
    FakeInvoiceRepository,
    FakeMonthEndRunRepository,
    FakeVendorClient,
)
from tests.fakes import START, FixedClock
from tests.support.servers import sandbox_vendor, smtp_server
from tests.support.services import store_engine

ACME = TenantId("acme")


# -- repositories: fake, SQLite, Postgres --------------------------------------------


@pytest.fixture(params=["fake", "sqlite", "postgres"])
async def session_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Any] | None]:
    if request.param == "fake":
        yield None
        return
    engine = await store_engine(
        request, tmp_path, "billing_invoices CASCADE", "billing_month_end_runs", "inbox"
    )
    yield lambda: AsyncSession(engine)
    await engine.dispose()


class Invoices:
    """An invoice repository under test, each call in its own committed transaction."""

    def __init__(self, session_factory: Callable[[], Any] | None) -> None:
        self._factory = session_factory
        self._fake: Any = FakeInvoiceRepository()
        self._real: Callable[[AsyncSession], Any] = SqlaInvoiceRepository

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._factory is None:
            return await getattr(self._fake, method)(*args, **kwargs)
        async with self._factory() as session:
            result = await getattr(self._real(session), method)(*args, **kwargs)
            await session.commit()
            return result


class MonthEndRuns(Invoices):
    """A month-end run repository under test, each call in its own transaction."""

    def __init__(self, session_factory: Callable[[], Any] | None) -> None:
        super().__init__(session_factory)
        self._fake = FakeMonthEndRunRepository({})
        self._real = SqlaMonthEndRunRepository


def _invoice(n: int = 0, tenant: str = "acme") -> Invoice:
    return Invoice(
        id=InvoiceId(uuid.UUID(int=(1 << 120) + n)),
        tenant_id=TenantId(tenant),
        customer_id=f"c{n % 2}",
        customer_email="c@example.com",
        currency="EUR",
        lines=[InvoiceLine("a", 2, Money(150, "EUR")), InvoiceLine("b", 1, Money(5, "EUR"))],
        created_at=START,
    )


async def test_an_invoice_comes_back_as_it_was_stored(session_factory: Any) -> None:
    invoices = Invoices(session_factory)
    stored = _invoice()
    stored.issue(START)
    await invoices.call("add", stored)

    found = await invoices.call("get", ACME, stored.id)

    assert found.status is InvoiceStatus.ISSUED
    assert found.issued_at == START
    assert found.lines == stored.lines
    assert found.total == Money(305, "EUR")
    assert await invoices.call("get", TenantId("globex"), stored.id) is None


async def test_saving_an_invoice_keeps_its_new_state(session_factory: Any) -> None:
    invoices = Invoices(session_factory)
    stored = _invoice()
    await invoices.call("add", stored)
    stored.issue(START)
    stored.pay(START)

    await invoices.call("save", stored)

    assert (await invoices.call("get", ACME, stored.id)).status is InvoiceStatus.PAID


async def test_invoices_are_listed_newest_first_in_pages(session_factory: Any) -> None:
    invoices = Invoices(session_factory)
    for n in range(5):
        await invoices.call("add", _invoice(n))
    await invoices.call("add", _invoice(9, tenant="globex"))

    first = await invoices.call("list", ACME, status=None, customer_id=None, limit=3, after=None)
    rest = await invoices.call(
        "list", ACME, status=None, customer_id=None, limit=3, after=first.next_after
    )
    by_customer = await invoices.call(
        "list", ACME, status=None, customer_id="c1", limit=10, after=None
    )

    assert [i.id.int & 0xFF for i in first.items + rest.items] == [4, 3, 2, 1, 0]
    assert rest.next_after is None
    assert [i.id.int & 0xFF for i in by_customer.items] == [3, 1]


async def test_the_invoices_due_for_a_months_run_are_the_tenants_drafts_before_its_end(
    session_factory: Any,
) -> None:
    invoices = Invoices(session_factory)
    november = BillingMonth(2026, 11)
    old, late = _invoice(1), _invoice(2)
    old.created_at = START - timedelta(days=60)
    late.created_at = november.ends_at
    issued = _invoice(3)
    issued.issue(START)
    for invoice in (_invoice(0), old, late, issued, _invoice(4, tenant="globex")):
        await invoices.call("add", invoice)

    due = await invoices.call("due_for_month_end", ACME, november)

    assert due == [old.id, _invoice(0).id]  # oldest first


async def test_a_month_end_run_is_stored_once_per_tenant_and_month(session_factory: Any) -> None:
    runs = MonthEndRuns(session_factory)
    november = BillingMonth(2026, 11)

    def run(tenant: str = "acme", due: int = 2) -> MonthEndRun:
        return MonthEndRun.start(
            tenant_id=TenantId(tenant), month=november, due=due, report_to="f@x.io", now=START
        )

    assert await runs.call("add", run())
    assert not await runs.call("add", run(due=5))
    assert await runs.call("add", run(tenant="globex"))
    stored = await runs.call("get", ACME, november)
    stored.batch_id = uuid.UUID(int=7)
    stored.finish(issued=1, failed=1, now=START)
    await runs.call("save", stored)

    found = await runs.call("get", ACME, november)
    assert (found.due, found.status, found.issued, found.failed) == (
        2,
        MonthEndRunStatus.FINISHED,
        1,
        1,
    )
    assert (found.batch_id, found.finished_at, found.started_at) == (uuid.UUID(int=7), START, START)
    assert await runs.call("get", ACME, BillingMonth(2026, 10)) is None
    assert (await runs.call("get", TenantId("globex"), november)).status is (
        MonthEndRunStatus.RUNNING
    )


async def test_the_inbox_takes_a_message_once_per_consumer(session_factory: Any) -> None:
    async def accept(consumer: str, message_id: str) -> bool:
        if session_factory is None:
            return await fake.accept(consumer, message_id)
        async with session_factory() as session:
            accepted = await SqlaInbox(session, FixedClock()).accept(consumer, message_id)
            await session.commit()
            return accepted

    fake = FakeInbox(set())

    assert await accept("receipts", "e1")
    assert not await accept("receipts", "e1")
    assert await accept("audit", "e1")


# -- the vendor: fake, and the HTTP client against the sandbox -------------------------


@pytest.fixture(params=["fake", "http"])
def vendor(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "fake":
        yield FakeVendorClient(pages=3, page_size=10)
        return
    with sandbox_vendor(rate_per_s=1000) as sandbox:
        yield HttpVendorClient(httpx.AsyncClient(base_url=sandbox.url + "/"))


async def test_a_vendor_pages_through_an_account(vendor: Any) -> None:
    cursor, ids = None, []
    for _ in range(10):
        page = await vendor.fetch_page("acct-1", cursor)
        ids += [item.id for item in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break

    assert len(ids) == len(set(ids)) == 30
    assert ids[0] == "acct-1-0"


async def test_a_vendor_refusal_is_permanent_and_says_why(vendor: Any) -> None:
    with pytest.raises(PermanentError, match="suspended"):
        await vendor.fetch_page("bad-acct", None)


async def test_the_http_vendor_client_turns_429_into_a_throttle_with_its_retry_after() -> None:
    with sandbox_vendor(rate_per_s=1) as sandbox:
        client = HttpVendorClient(httpx.AsyncClient(base_url=sandbox.url + "/"))
        await client.fetch_page("a", None)
        with pytest.raises(ThrottledError) as caught:
            await client.fetch_page("a", None)
    assert caught.value.retry_after_s == 1.0


# -- e-mail: fake, and SMTP against a real SMTP server ---------------------------------


@pytest.fixture(params=["fake", "smtp"])
def email(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Callable[[], list[str]]]]:
    if request.param == "fake":
        fake = FakeEmailSender()
        yield fake, lambda: [m.recipient for m in fake.sent]
        return
    with smtp_server() as sink:
        sender = SmtpEmailSender(NotificationsSettings(email_backend="smtp", smtp_port=sink.port))
        yield sender, lambda: [str(m["To"]) for m in sink.messages]


async def test_an_email_sent_is_an_email_received(email: Any) -> None:
    sender, received = email

    await sender.send(EmailMessage("m1", "c1@example.com", "Receipt", "Thanks"))

    assert received() == ["c1@example.com"]


async def test_an_unreachable_smtp_server_is_a_transient_failure() -> None:
    from jobrail.kernel.errors import TransientError

    sender = SmtpEmailSender(
        NotificationsSettings(email_backend="smtp", smtp_port=1, smtp_timeout_s=1)
    )
    with pytest.raises(TransientError):
        await sender.send(EmailMessage("m1", "c1@example.com", "s", "b"))
