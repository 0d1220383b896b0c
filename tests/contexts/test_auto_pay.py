"""Billing's scheduled auto-pay: invoices that opted in are paid once issued, each by
one ``billing.pay_invoice`` job under its own tenant."""

import copy
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from contexts.billing.adapters.persistence import SqlaInvoiceRepository
from contexts.billing.application.commands import CreateInvoiceCommand, InvoiceCommand, LineInput
from contexts.billing.application.ports import InvoiceRef
from contexts.billing.application.use_cases import CreateInvoice, IssueInvoice, StartAutoPay
from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceLine, InvoiceStatus
from jobrail.kernel.ids import TenantId
from jobrail.kernel.money import Money
from tests.contexts.fakes import FakeBillingUnitOfWork, FakeInvoiceRepository
from tests.fakes import START, FixedClock
from tests.support.services import store_engine

ACME = TenantId("acme")
GLOBEX = TenantId("globex")


class AutoPayInvoices(FakeInvoiceRepository):
    """The billing fake, with the auto-pay query."""

    async def due_for_auto_pay(
        self, *, after: InvoiceId | None, limit: int
    ) -> Sequence[InvoiceRef]:
        due = sorted(
            (
                i
                for i in self.store.values()
                if i.due_for_auto_pay and (after is None or i.id > after)
            ),
            key=lambda i: i.id,
        )
        return [InvoiceRef(i.tenant_id, i.id) for i in due[:limit]]


class AutoPayUnitOfWork(FakeBillingUnitOfWork):
    def _begin(self) -> None:
        super()._begin()
        self.invoices = AutoPayInvoices(copy.deepcopy(self.store))


async def issued(uow: AutoPayUnitOfWork, tenant: TenantId, *, auto_pay: bool) -> Invoice:
    clock = FixedClock()
    invoice = await CreateInvoice(uow, clock)(
        CreateInvoiceCommand(
            tenant, "c1", "c1@example.com", "EUR", (LineInput("widget", 1, 500),), auto_pay=auto_pay
        )
    )
    return await IssueInvoice(uow, clock)(InvoiceCommand(tenant, invoice.id))


def test_an_invoice_is_due_for_auto_pay_while_issued_if_its_customer_opted_in() -> None:
    invoice = Invoice(
        id=InvoiceId(uuid.uuid4()),
        tenant_id=ACME,
        customer_id="c1",
        customer_email="c1@example.com",
        currency="EUR",
        lines=[InvoiceLine("widget", 1, Money(500, "EUR"))],
        created_at=START,
        auto_pay=True,
    )
    assert invoice.due_for_auto_pay is False  # a draft

    invoice.issue(START)
    assert invoice.due_for_auto_pay is True

    invoice.pay(START)
    assert invoice.due_for_auto_pay is False


async def test_auto_pay_enqueues_one_payment_per_due_invoice_under_its_own_tenant() -> None:
    uow = AutoPayUnitOfWork()
    acme = await issued(uow, ACME, auto_pay=True)
    globex = await issued(uow, GLOBEX, auto_pay=True)
    await issued(uow, ACME, auto_pay=False)

    started = await StartAutoPay(uow)()

    assert (started.due, started.enqueued) == (2, 2)
    jobs = {
        (j.tenant_id, j.type, j.payload["invoice_id"], j.idempotency_key)
        for j in uow.committed_jobs
    }
    assert jobs == {
        (ACME, "billing.pay_invoice", str(acme.id), f"auto-pay:{acme.id}"),
        (GLOBEX, "billing.pay_invoice", str(globex.id), f"auto-pay:{globex.id}"),
    }


async def test_running_auto_pay_again_enqueues_no_second_payment_for_an_invoice() -> None:
    uow = AutoPayUnitOfWork()
    await issued(uow, ACME, auto_pay=True)
    await StartAutoPay(uow)()
    await issued(uow, GLOBEX, auto_pay=True)

    again = await StartAutoPay(uow)()

    assert (again.due, again.enqueued) == (2, 1)
    assert len(uow.committed_jobs) == 2


async def test_auto_pay_goes_through_every_page_of_due_invoices() -> None:
    uow = AutoPayUnitOfWork()
    for _ in range(5):
        await issued(uow, ACME, auto_pay=True)
    start = StartAutoPay(uow)
    start.page = 2

    started = await start()

    assert (started.due, started.enqueued) == (5, 5)
    assert uow.commits == 5 * 2 + 3  # create and issue each, then one per page


# -- the query, on the fake, SQLite and Postgres ----------------------------------------


@pytest.fixture(params=["fake", "sqlite", "postgres"])
async def repository(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Any]]:
    if request.param == "fake":
        fake = AutoPayInvoices()

        class Same:
            async def __aenter__(self) -> AutoPayInvoices:
                return fake

            async def __aexit__(self, *exc: object) -> None:
                return None

        yield Same
        return
    engine = await store_engine(request, tmp_path, "billing_invoices CASCADE")

    class Committed:
        async def __aenter__(self) -> SqlaInvoiceRepository:
            self.session = AsyncSession(engine)
            return SqlaInvoiceRepository(self.session)

        async def __aexit__(self, *exc: object) -> None:
            await self.session.commit()
            await self.session.close()

    yield Committed
    await engine.dispose()


def invoice(n: int, tenant: TenantId, *, auto_pay: bool, status: InvoiceStatus) -> Invoice:
    made = Invoice(
        id=InvoiceId(uuid.UUID(int=(1 << 120) + n)),
        tenant_id=tenant,
        customer_id="c1",
        customer_email="c1@example.com",
        currency="EUR",
        lines=[InvoiceLine("widget", 1, Money(500, "EUR"))],
        created_at=START,
        auto_pay=auto_pay,
    )
    if status is not InvoiceStatus.DRAFT:
        made.issue(START)
    if status is InvoiceStatus.PAID:
        made.pay(START)
    if status is InvoiceStatus.VOID:
        made.void(START)
    return made


async def test_the_invoices_due_for_auto_pay_are_the_issued_opted_in_ones_of_every_tenant(
    repository: Callable[[], Any],
) -> None:
    stored = [
        invoice(1, ACME, auto_pay=True, status=InvoiceStatus.ISSUED),
        invoice(2, GLOBEX, auto_pay=True, status=InvoiceStatus.ISSUED),
        invoice(3, ACME, auto_pay=False, status=InvoiceStatus.ISSUED),
        invoice(4, ACME, auto_pay=True, status=InvoiceStatus.DRAFT),
        invoice(5, ACME, auto_pay=True, status=InvoiceStatus.PAID),
        invoice(6, GLOBEX, auto_pay=True, status=InvoiceStatus.VOID),
        invoice(7, GLOBEX, auto_pay=True, status=InvoiceStatus.ISSUED),
    ]
    for one in stored:
        async with repository() as invoices:
            await invoices.add(one)

    async with repository() as invoices:
        first = await invoices.due_for_auto_pay(after=None, limit=2)
        rest = await invoices.due_for_auto_pay(after=first[-1].invoice_id, limit=2)
        found = await invoices.get(ACME, stored[0].id)

    assert [(r.tenant_id, r.invoice_id.int & 0xFF) for r in [*first, *rest]] == [
        (ACME, 1),
        (GLOBEX, 2),
        (GLOBEX, 7),
    ]
    assert found.auto_pay is True
